"""Settings shared by every environment; the environments (dev, test, prod) only
override. Each area past a screen of settings has its own module, star-imported here
(inference, memory, bounds, evaluation, safety, search, tools).

All configuration comes from the environment through one django-environ `env`. With no
`DATABASE_URL` / `REDIS_URL` set, the URLs of the private services that `make run` /
`make test` start under `.var/` are read from `.var/services.env` (written by
`scripts/services.py`); variables already in the environment always win.
"""

from chatsite.sentinel import redis_caches, sentinel_celery_broker
from chatsite.settings.environment import BASE_DIR, VAR_DIR, env

SECRET_KEY = env("DJANGO_SECRET_KEY", default="dev-insecure-change-me")
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list(
    "DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"]
)
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "csp",
    "channels",
    "accounts",
    "conversations",
    "evaluation",
    "gateway",
    "memory",
    "safety",
    "tools",
    "inference",
    "audit",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # django-csp's, its policy built once (chatsite/middleware.py)
    "chatsite.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # an upload's name keeps all but its leading directories (chatsite/uploads.py);
    # before CSRF, which may parse the form
    "chatsite.uploads.readable_upload_names",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # input no database or Python can store back is a 400 before any view
    "chatsite.storable.storable_input",
    # a suspended user writes nothing (safety/middleware.py)
    "safety.middleware.suspended_writes",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "chatsite.middleware.method_not_allowed_pages",
]
# A CSRF failure is the site's 403 page, not Django's (whose debug page shows under DEBUG).
CSRF_FAILURE_VIEW = "chatsite.http.csrf_failure"

# The OpenAI-compatible API's own handler (chatsite/asgi.py), which serves the paths of
# conversations/openai/urls.py: Bearer keys and JSON, so no session, CSRF, login or
# messages middleware.
API_MIDDLEWARE = ["chatsite.middleware.api_middleware"]

# Content-Security-Policy (django-csp 4; DESIGN §10: rendering loads no remote
# resource). Every page may load images, scripts, styles, fonts and connections (the
# chat's EventSource and fetch) from our own origin only: a model's answer, or a document
# quoted in it, cannot make the browser send data elsewhere, even if some HTML got past
# the renderer (conversations/rendering.py turns every image into a link). No frames,
# plugins, <base> or form posts elsewhere, and no inline script or style (the admin's
# pages need none: tests/browser/test_chat.py checks them in Chromium for violations).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'none'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "manifest-src": ["'self'"],
        "frame-src": ["'none'"],
        "frame-ancestors": ["'none'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
    }
}

ROOT_URLCONF = "chatsite.urls"
ASGI_APPLICATION = "chatsite.asgi.application"
WSGI_APPLICATION = "chatsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # the sidebar's chat list on every signed-in page
                "conversations.context_processors.sidebar",
            ],
        },
    },
]

DATABASES = {
    "default": env.db(
        "DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/chatsite"
    )
}


# How long opening a PostgreSQL connection may take, s (libpq's connect_timeout; it
# counts 2 s as its least). A stopped or unreachable server fails a request after this
# long instead of the OS's TCP timeout (minutes): chatsite.http maps it to a 503.
DATABASE_CONNECT_TIMEOUT_S = env.int("DATABASE_CONNECT_TIMEOUT_S", default=2)
# How long a request waits for a pooled connection, s; then it gets a 503 with
# Retry-After (chatsite.http.server_error). With PostgreSQL down, requests on dead
# pooled connections fail at once and the next ones wait this long: 1 s answers
# every request within about a second (tests/test_faults_database.py), but under a
# flood of concurrent POSTs (more than the pool holds) it also refuses other users'
# turns that a short wait would serve, so the default keeps psycopg_pool's 30 s.
DATABASE_POOL_TIMEOUT_S = env.float("DATABASE_POOL_TIMEOUT_S", default=30.0)


def database_pool(database: dict, max_size: int) -> dict:
    """Return ``database`` with psycopg's connection pool on (Django >= 5.1).

    Opening a PostgreSQL connection costs 1-8 ms (measured on the dev machine), more
    than a whole gateway admission, and a process that opens one per streaming request
    runs into ``max_connections`` at a few hundred streams. With the pool, closing a
    connection (end of a request, ``chatsite.db.db_brief``) hands it back; a
    request that finds all ``max_size`` connections in use waits up to
    DATABASE_POOL_TIMEOUT_S seconds. ``max_size`` 0 turns the pool off (one connection
    per request, CONN_MAX_AGE 0). Either way a new connection gives up after
    DATABASE_CONNECT_TIMEOUT_S seconds.
    """
    options = {**database.get("OPTIONS", {})}
    options.setdefault("connect_timeout", DATABASE_CONNECT_TIMEOUT_S)
    if max_size <= 0:
        return {**database, "OPTIONS": options}
    options["pool"] = {
        "min_size": 1,
        "max_size": max_size,
        "timeout": DATABASE_POOL_TIMEOUT_S,
    }
    return {**database, "CONN_MAX_AGE": 0, "OPTIONS": options}


DATABASES["default"]["CONN_MAX_AGE"] = 0
# Connections per process (web, celery, worker); PostgreSQL's max_connections (200 for
# the embedded one, scripts/services.py) bounds the sum over all processes.
DATABASE_POOL_MAX_SIZE = env.int("DATABASE_POOL_MAX_SIZE", default=16)
# Brief database steps of async views (a streamed answer's settlement, its final frame)
# that run at once per process (chatsite/db.py); the rest wait on the event loop.
# Half the pool: the other half stays free for sync views (a new turn's POST).
DATABASE_BRIEF_CONCURRENCY = env.int("DATABASE_BRIEF_CONCURRENCY", default=8)
# Sync middleware chains (every page and form POST, the chat's message POST) that run
# at once per web process (chatsite/asgi.py): the next ones wait on the event loop, in
# order, instead of sharing the GIL with all the others (the other half of the pool).
WEB_SYNC_CONCURRENCY = env.int("WEB_SYNC_CONCURRENCY", default=8)
# Reusable threads per process for the API's admission step (chatsite/db.py db_quick):
# mostly Redis, a pooled database connection only on an API key cache miss.
DATABASE_QUICK_THREADS = env.int("DATABASE_QUICK_THREADS", default=4)
DATABASES["default"] = database_pool(DATABASES["default"], DATABASE_POOL_MAX_SIZE)
# A web process opens its pooled PostgreSQL and Redis connections and loads the
# gateway's config in a thread as it starts (chatsite/warmup.py), so that its first
# turn does not pay for them.
WEB_WARM_SERVICES = env.bool("WEB_WARM_SERVICES", default=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# One Redis for queues, streams, quotas, the cache, rate limits and the Celery broker:
# redis://HOST:PORT/DB, or a Sentinel URL for failover,
# redis+sentinel://[:PASSWORD@]SENTINEL:PORT[,SENTINEL:PORT...]/SERVICE/DB
# (chatsite/sentinel.py; deploy/README.md "Redis failover"), or a Redis Cluster,
# redis+cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...][?read_from_replicas=1]
# (chatsite/redis_cluster.py; deploy/redis-cluster.md).
REDIS_URL = env("REDIS_URL", default="redis://127.0.0.1:6379/0")
# Connections one process's async Redis client may open (inference/connections.py): one
# per open stream (blocking XREAD) in the web tier. Redis itself accepts 10,000 clients.
REDIS_ASYNC_MAX_CONNECTIONS = env.int("REDIS_ASYNC_MAX_CONNECTIONS", default=5000)
# The process's sync Redis pool (request threads, Celery tasks): at most this many
# connections; a thread finding none free waits up to REDIS_SYNC_POOL_TIMEOUT_S (s).
REDIS_SYNC_MAX_CONNECTIONS = env.int("REDIS_SYNC_MAX_CONNECTIONS", default=200)
REDIS_SYNC_POOL_TIMEOUT_S = env.float("REDIS_SYNC_POOL_TIMEOUT_S", default=10.0)
# On a cluster: how long a stream that cannot be read is retried before its followers
# get a retryable error (s). A master's failover takes its cluster-node-timeout (Redis's
# default 15 s, deploy/redis-cluster.md) plus about a second of election.
REDIS_CLUSTER_FAILOVER_S = env.float("REDIS_CLUSTER_FAILOVER_S", default=20.0)

# The site cache's pool per process, shared by its requests (sentinel.redis_cache_config)
CACHE_MAX_CONNECTIONS = env.int("CACHE_MAX_CONNECTIONS", default=256)
CACHE_POOL_TIMEOUT_S = env.float("CACHE_POOL_TIMEOUT_S", default=10.0)
CACHES = redis_caches(
    REDIS_URL, size=CACHE_MAX_CONNECTIONS, wait_s=CACHE_POOL_TIMEOUT_S
)
# Sessions read from that cache, written through to the database (Django's cached_db):
# a signed-in request's session costs a Redis GET instead of a query; PostgreSQL stays
# the record, so a flushed or restarted Redis signs nobody out.
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

AUTH_PASSWORD_VALIDATORS = [
    {
        "NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"
    },
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# The signed-in user and their suspension flag in one query per request
# (safety/backends.py); ModelBackend after it keeps the sessions it signed in before.
AUTHENTICATION_BACKENDS = [
    "safety.backends.SessionUserBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat-home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# The web process serves static files itself (chatsite/asgi.py): dev; a proxy in prod.
SERVE_STATIC = env.bool("DJANGO_SERVE_STATIC", default=DEBUG)
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"

# Celery (CONVENTIONS §7): broker and results on the same Redis.
# A Sentinel URL becomes kombu's sentinel:// URLs and its master_name option; a cluster
# URL the rediscluster:// transport of chatsite/kombu_cluster.py.
CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = sentinel_celery_broker(
    env("CELERY_BROKER_URL", default=REDIS_URL)
)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "reap-streaming-messages": {
        "task": "conversations.tasks.reap_streaming_messages",
        "schedule": env.float("REAPER_INTERVAL_S", default=15.0),
    },
}

# --- Chat -------------------------------------------------------------------------
# Longest user message accepted, in characters (about 8,000 tokens). Longer: 413.
CHAT_MAX_MESSAGE_CHARS = env.int("CHAT_MAX_MESSAGE_CHARS", default=32_000)
# Titles from the first user message (Markdown stripped) are cut to this many characters.
CHAT_TITLE_MAX_CHARS = 60
# Which documents a new chat's answers search until the user picks: "all"
# (every ready document, filtered by MEMORY_RETRIEVE_MIN_SCORE) or "none".
CHAT_DOCUMENT_SCOPE_DEFAULT = env("CHAT_DOCUMENT_SCOPE_DEFAULT", default="all")
# Names the pages show for model ids (ModelPool.model), e.g.
# CHAT_MODEL_DISPLAY_NAMES="SmolLM2-135M-Instruct.Q4_1=SmolLM2 135M"; an id not listed is
# shown prettified ("SmolLM2 135M Instruct": accounts.templatetags.ui.model_label).
CHAT_MODEL_DISPLAY_NAMES = env.dict("CHAT_MODEL_DISPLAY_NAMES", default={})
# Answer length asked of the engine, in tokens.
CHAT_MAX_TOKENS = env.int("CHAT_MAX_TOKENS", default=512)
CHAT_TEMPERATURE = env.float("CHAT_TEMPERATURE", default=0.7)
CHAT_SYSTEM_PROMPT = env(
    "CHAT_SYSTEM_PROMPT",
    default="You are a helpful, concise assistant. Answer in Markdown when it helps.",
)

# The inference tier, embeddings, workers and metrics: chatsite/settings/inference.py
from chatsite.settings.inference import *  # noqa: E402, F403

# A `streaming` message whose job has no stream left after this long is finalised as an error.
REAPER_STALE_AFTER_S = env.float("REAPER_STALE_AFTER_S", default=900.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}

# --- Gateway (DESIGN §4 step 2) --------------------------------------------------------
# Reservation estimate of prompt tokens: characters per token (low = conservative).
GATEWAY_CHARS_PER_TOKEN = env.float("GATEWAY_CHARS_PER_TOKEN", default=3.0)
# Used when the database defines no ModelPool: the INFERENCE_DEFAULT_POOL limits.
GATEWAY_MAX_OUTPUT_TOKENS = env.int("GATEWAY_MAX_OUTPUT_TOKENS", default=4096)
GATEWAY_QUEUE_THRESHOLD = env.int("GATEWAY_QUEUE_THRESHOLD", default=32)
# Under pressure the lowest-priority plan is admitted only below this share of a pool's
# queue_threshold (shed first).
GATEWAY_SHED_FRACTION = env.float("GATEWAY_SHED_FRACTION", default=0.5)
# Retry-After (s) of a 503 when every pool that could answer is saturated.
GATEWAY_SATURATED_RETRY_AFTER_S = env.int("GATEWAY_SATURATED_RETRY_AFTER_S", default=5)
# Difficulty heuristic: a last user message up to this many characters (and 3 lines, no
# code) is "simple" and goes to the cheapest pool of the plan.
GATEWAY_SIMPLE_MAX_CHARS = env.int("GATEWAY_SIMPLE_MAX_CHARS", default=280)
# Pools and plans (admin-edited) are cached per process for this many seconds.
GATEWAY_CONFIG_CACHE_S = env.float("GATEWAY_CONFIG_CACHE_S", default=5.0)
# API key lookups (the key, its user, subscription and suspension) are cached per
# process for this many seconds (gateway/apikey_cache.py: a revocation, suspension or
# plan move applies within it; 0: not cached), at most this many keys.
GATEWAY_API_KEY_CACHE_S = env.float("GATEWAY_API_KEY_CACHE_S", default=5.0)
GATEWAY_API_KEY_CACHE_ENTRIES = env.int("GATEWAY_API_KEY_CACHE_ENTRIES", default=10_000)
# A generation failing before its first token is retried this often on a fallback pool.
GATEWAY_FALLBACK_RETRIES = env.int("GATEWAY_FALLBACK_RETRIES", default=1)
# A quota reservation whose job was not submitted (enqueued or served from a cache) this
# many seconds after it was made belongs to a web process that died: the sweep below
# releases it (gateway.quota_sweep.quota_reservations_sweep). Admission to submission takes
# milliseconds (one transaction), so a minute leaves a wide margin.
GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S = env.float(
    "GATEWAY_RESERVATION_SUBMIT_TIMEOUT_S", default=60.0
)
CELERY_BEAT_SCHEDULE["sweep-quota-reservations"] = {
    "task": "gateway.tasks.sweep_quota_reservations",
    "schedule": 30.0,
}
# Request-rate limits and the sign-in lockout: chatsite/settings/bounds.py
MIDDLEWARE += ["gateway.ratelimits.RatelimitMiddleware"]
# Memory and RAG (DESIGN §9): chatsite/settings/memory.py
from chatsite.settings.memory import *  # noqa: E402, F403

# After an answer: title the conversation, roll its summary, extract facts (Celery).
CHAT_BACKGROUND_JOBS = env.bool("CHAT_BACKGROUND_JOBS", default=True)
# --- Gateway answer caches (gateway/cache/) -------------------------------------------
# Used only for deterministic requests (temperature 0) or when the request opts in
# (param "cache": true). Exact cache (Redis): an entry lives this many seconds.
GATEWAY_CACHE_ENABLED = env.bool("GATEWAY_CACHE_ENABLED", default=True)
GATEWAY_CACHE_TTL_S = env.int("GATEWAY_CACHE_TTL_S", default=86400)
# Semantic cache (pgvector): a hit needs at least this cosine similarity (0..1) between
# the prompts' all-MiniLM-L6-v2 embeddings; entries older than the TTL are not served.
GATEWAY_SEMANTIC_CACHE_ENABLED = env.bool(
    "GATEWAY_SEMANTIC_CACHE_ENABLED", default=True
)
GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY = env.float(
    "GATEWAY_SEMANTIC_CACHE_MIN_SIMILARITY", default=0.9
)
GATEWAY_SEMANTIC_CACHE_TTL_S = env.int(
    "GATEWAY_SEMANTIC_CACHE_TTL_S", default=7 * 86400
)
# A cached answer is streamed as token events of at most this many characters.
GATEWAY_CACHE_CHUNK_CHARS = env.int("GATEWAY_CACHE_CHUNK_CHARS", default=24)
CELERY_BEAT_SCHEDULE["prune-semantic-cache"] = {
    "task": "gateway.tasks.prune_semantic_cache",
    "schedule": 3600.0,
}
# --- The generation lifecycle (gateway/generations/) -----------------------------------
# A follower retries settling a generation this long (s) while the database or Redis
# come back (a restart or failover takes seconds); after that the stream ends with an
# error event and the reaper settles the answer later.
GATEWAY_SETTLE_RETRY_S = env.float("GATEWAY_SETTLE_RETRY_S", default=10.0)
# Stream policies (dotted paths of gateway.generations.policy.StreamPolicy subclasses),
# applied in order to every generation's text before any surface sees it. A policy
# whose active() is False (output moderation while SAFETY_OUTPUT_ENABLED is off) is
# skipped.
GATEWAY_STREAM_POLICIES = env.list(
    "GATEWAY_STREAM_POLICIES",
    default=["gateway.generations.moderation.OutputModeration"],
)

# The OpenAI-compatible API's limits (/v1/): chatsite/settings/api.py
from chatsite.settings.api import *  # noqa: E402, F403

# Caps on the work one request can cause: chatsite/settings/bounds.py
from chatsite.settings.bounds import *  # noqa: E402, F403

# Evaluation runs (evaluation/): chatsite/settings/evaluation.py
from chatsite.settings.evaluation import *  # noqa: E402, F403

# Safety (moderation, documents screening, abuse limits): chatsite/settings/safety.py
from chatsite.settings.safety import *  # noqa: E402, F403

# Conversation search, export and import: chatsite/settings/search.py
from chatsite.settings.search import *  # noqa: E402, F403

# Tools (the registry, the sandbox, the chat's tool loop): chatsite/settings/tools.py
from chatsite.settings.tools import *  # noqa: E402, F403
