"""Tools the assistant can call (DESIGN §13): the registry, the built-in tools
(documents search, sandboxed Python, web search and fetch) and MCP clients.

Kept free of Django models: the built-in tools are plain functions over their
settings, so the turn loop and the API both call the same ones.
"""
