"""Caps on the work one request can cause (CONVENTIONS §11), kept apart from base.py,
which star-imports them; the README's "Security limits" table lists them. Values come
from the same django-environ ``env``."""

from chatsite.settings.environment import env

# --- Request bodies (chatsite/bodycap.py, chatsite/jsonbody.py) -------------------------
# Largest request body, bytes, refused (413) by the app itself before anything parses
# it (Django's DATA_UPLOAD_MAX_MEMORY_SIZE default).
REQUEST_MAX_BODY_BYTES = env.int("REQUEST_MAX_BODY_BYTES", default=2_621_440)
# The upload forms' caps: URL name -> the setting that holds the file's own limit, in
# bytes; the form around the file may add REQUEST_UPLOAD_FORM_BYTES.
REQUEST_BODY_CAPS = {
    "document-upload": "MEMORY_UPLOAD_MAX_BYTES",
    "conversations-import": "CHAT_IMPORT_MAX_BYTES",
    "evaluation_evalset_import": "EVAL_IMPORT_MAX_BYTES",
}
REQUEST_UPLOAD_FORM_BYTES = env.int("REQUEST_UPLOAD_FORM_BYTES", default=256 * 1024)
EVAL_IMPORT_MAX_BYTES = env.int("EVAL_IMPORT_MAX_BYTES", default=10 * 1024 * 1024)
# Deepest nesting of arrays and objects in a JSON body or file (400 deeper).
JSON_MAX_DEPTH = env.int("JSON_MAX_DEPTH", default=64)

# --- Documents (memory/extract.py) ------------------------------------------------------
# Text extraction runs in the ingest task, never in the request: at most this many
# characters of text per document (about 300,000 tokens, 1,300 chunks), PDF pages,
# bytes of decompressed page content (a stream shared by N pages counts N times: each
# page parses it), seconds and bytes of memory of the PDF reader's process.
MEMORY_EXTRACT_MAX_CHARS = env.int("MEMORY_EXTRACT_MAX_CHARS", default=1_000_000)
MEMORY_PDF_MAX_PAGES = env.int("MEMORY_PDF_MAX_PAGES", default=1000)
MEMORY_PDF_MAX_CONTENT_BYTES = env.int(
    "MEMORY_PDF_MAX_CONTENT_BYTES", default=16 * 1024 * 1024
)
MEMORY_EXTRACT_TIMEOUT_S = env.float("MEMORY_EXTRACT_TIMEOUT_S", default=60.0)
MEMORY_EXTRACT_MAX_MEMORY_BYTES = env.int(
    "MEMORY_EXTRACT_MAX_MEMORY_BYTES", default=1024 * 1024 * 1024
)
# The whole ingest task (extraction, embedding, storing) under a prefork Celery pool:
# a soft time limit, s (the solo pool of `make run` enforces none; the reader's own
# deadline above holds in any pool).
MEMORY_INGEST_TIME_LIMIT_S = env.float("MEMORY_INGEST_TIME_LIMIT_S", default=900.0)
CELERY_TASK_ANNOTATIONS = {
    "memory.tasks.ingest_document": {"soft_time_limit": MEMORY_INGEST_TIME_LIMIT_S}
}

# --- Text the pages and the turn look at -----------------------------------------------
# Import: most characters of message text in one file, all messages together (the
# other import caps are in base.py beside CHAT_IMPORT_MAX_BYTES).
CHAT_IMPORT_MAX_TOTAL_CHARS = env.int("CHAT_IMPORT_MAX_TOTAL_CHARS", default=5_000_000)
# A message longer than this many characters is shown as plain text, not rendered as
# Markdown (conversations/rendering.py: rendering work grows with the length).
CHAT_RENDER_MAX_CHARS = env.int("CHAT_RENDER_MAX_CHARS", default=100_000)
# The remember request ("remember that ...") is looked for only in messages up to this
# many characters (a fact holds at most 500).
MEMORY_REMEMBER_MAX_CHARS = env.int("MEMORY_REMEMBER_MAX_CHARS", default=2000)

# --- Rates ---------------------------------------------------------------------------
# Request-rate limits (django-ratelimit on the Redis cache): "count/period".
CHAT_MESSAGE_RATE = env("CHAT_MESSAGE_RATE", default="30/m")  # per user
LOGIN_RATE = env("LOGIN_RATE", default="10/m")  # per client IP
# Per account (the username typed, whether or not it exists): after this many failed
# sign-ins in LOGIN_FAILURE_WINDOW_S, the account is locked for LOGIN_LOCKOUT_BASE_S,
# doubled with each further failure, at most LOGIN_LOCKOUT_MAX_S
# (gateway/ratelimits.py).
LOGIN_ACCOUNT_FAILURES = env.int("LOGIN_ACCOUNT_FAILURES", default=5)
LOGIN_FAILURE_WINDOW_S = env.int("LOGIN_FAILURE_WINDOW_S", default=86400)
LOGIN_LOCKOUT_BASE_S = env.int("LOGIN_LOCKOUT_BASE_S", default=60)
LOGIN_LOCKOUT_MAX_S = env.int("LOGIN_LOCKOUT_MAX_S", default=3600)
# django-ratelimit counts in its own alias of the cache (chatsite/sentinel.py
# redis_caches): the same keys, one round trip per count
RATELIMIT_USE_CACHE = "ratelimit"
RATELIMIT_VIEW = "gateway.views.ratelimited"
