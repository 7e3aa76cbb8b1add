"""The LLM gateway: policy between the chat turn (and the API) and the inference queue.

Before anything is enqueued it decides whether a request may run and where (DESIGN §4
step 2): token quotas, request-rate limits, routing to a pool, answer caches, fallback
and admission, and it records usage for billing. One module per policy; the Redis keys
they use are all in :mod:`inference.keys`.
"""
