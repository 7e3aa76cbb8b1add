"""Conversations: models, the chat turn, UI views and the SSE relay."""
