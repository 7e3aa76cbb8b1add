"""The LLM gateway: policy between the chat turn (and the API) and the inference queue.

Today it routes to the default pool and enqueues; quotas, caching, fallback and billing
come with issue #4 (DESIGN §4 step 2).
"""
