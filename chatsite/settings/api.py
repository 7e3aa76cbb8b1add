"""Settings of the OpenAI-compatible API (/v1/, conversations/openai/): its request
limits and waits, kept apart from base.py, which star-imports them. Values come from
the same django-environ ``env``."""

from chatsite.settings.environment import env

# --- OpenAI-compatible API (/v1/, conversations/openai/) -------------------------------
# Most characters accepted in one request's messages (413 above).
API_MAX_PROMPT_CHARS = env.int("API_MAX_PROMPT_CHARS", default=128_000)
# A client that disconnects cancels its job; its usage is settled from the worker's final
# event, waited for at most this many seconds.
API_CANCEL_SETTLE_WAIT_S = env.float("API_CANCEL_SETTLE_WAIT_S", default=3.0)
# POST /v1/embeddings: most inputs per request (OpenAI's limit), most characters per
# input and per request (400 above; a model reads at most its window of each input,
# 256 word pieces for all-MiniLM-L6-v2, and cuts the rest).
API_EMBEDDING_MAX_INPUTS = env.int("API_EMBEDDING_MAX_INPUTS", default=2048)
API_EMBEDDING_MAX_INPUT_CHARS = env.int("API_EMBEDDING_MAX_INPUT_CHARS", default=32_000)
API_EMBEDDING_MAX_TOTAL_CHARS = env.int(
    "API_EMBEDDING_MAX_TOTAL_CHARS", default=1_000_000
)
# How long an embeddings request waits for its vectors, s (503 after). Capped at half
# GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S: the request's reservation must not be swept
# while it waits.
API_EMBEDDING_TIMEOUT_S = env.float("API_EMBEDDING_TIMEOUT_S", default=30.0)
