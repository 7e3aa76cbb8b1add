"""Memory and RAG settings (memory.documents, .context, .facts, .summary), kept apart
from base.py, which star-imports them. Values come from the same django-environ
``env``."""

from chatsite.settings.environment import env
from chatsite.settings.inference import INFERENCE_DEFAULT_POOL

# --- Memory and RAG (DESIGN §9) --------------------------------------------------------
# Uploads: .txt/.md/.pdf up to this many bytes.
MEMORY_UPLOAD_MAX_BYTES = env.int("MEMORY_UPLOAD_MAX_BYTES", default=5 * 1024 * 1024)
# Chunk size and overlap, in tokens of the embedding model (all-MiniLM-L6-v2 reads 256).
MEMORY_CHUNK_TOKENS = env.int("MEMORY_CHUNK_TOKENS", default=200)
MEMORY_CHUNK_OVERLAP_TOKENS = env.int("MEMORY_CHUNK_OVERLAP_TOKENS", default=40)
# Retrieval per turn: top-k chunks whose cosine similarity to the question is at least
# MEMORY_RETRIEVE_MIN_SCORE (measured on all-MiniLM-L6-v2: memory.context.
# passage_max_distance), top-k facts within a cosine distance (0..2).
MEMORY_RETRIEVAL_K = env.int("MEMORY_RETRIEVAL_K", default=5)
MEMORY_RETRIEVE_MIN_SCORE = env.float("MEMORY_RETRIEVE_MIN_SCORE", default=0.40)
# HNSW candidate list size per search (pgvector hnsw.ef_search): recall vs latency.
MEMORY_HNSW_EF_SEARCH = env.int("MEMORY_HNSW_EF_SEARCH", default=100)
MEMORY_FACTS_K = env.int("MEMORY_FACTS_K", default=5)
MEMORY_FACTS_MAX_DISTANCE = env.float("MEMORY_FACTS_MAX_DISTANCE", default=0.8)
# A new fact this close (cosine distance) to an existing one replaces it.
MEMORY_FACT_DUPLICATE_DISTANCE = env.float(
    "MEMORY_FACT_DUPLICATE_DISTANCE", default=0.15
)
# Context builder: the serving pool's context window (tokens; the llama.cpp worker's
# --n-ctx), the engine whose tokenizer + chat template count prompts (llamacpp|scripted),
# and the token budgets of each part (the answer's reserve is the job's max_tokens).
MEMORY_CONTEXT_TOKENS = env.int("MEMORY_CONTEXT_TOKENS", default=4096)
MEMORY_TOKENIZER_ENGINE = env("MEMORY_TOKENIZER_ENGINE", default="llamacpp")
MEMORY_BUDGET_FACTS_TOKENS = env.int("MEMORY_BUDGET_FACTS_TOKENS", default=256)
MEMORY_BUDGET_CHUNKS_TOKENS = env.int("MEMORY_BUDGET_CHUNKS_TOKENS", default=1024)
MEMORY_BUDGET_SUMMARY_TOKENS = env.int("MEMORY_BUDGET_SUMMARY_TOKENS", default=512)
# Rolling summary: summarise when the unsummarised history passes this many tokens,
# keeping this many latest messages verbatim; background generations wait this long (s).
MEMORY_SUMMARY_TRIGGER_TOKENS = env.int("MEMORY_SUMMARY_TRIGGER_TOKENS", default=1500)
MEMORY_SUMMARY_KEEP_MESSAGES = env.int("MEMORY_SUMMARY_KEEP_MESSAGES", default=6)
MEMORY_GENERATION_TIMEOUT_S = env.float("MEMORY_GENERATION_TIMEOUT_S", default=120.0)
# Extract facts from conversations with the model after each exchange (Celery).
MEMORY_EXTRACT_FACTS = env.bool("MEMORY_EXTRACT_FACTS", default=True)
# Background generations (titles, summaries, fact extraction) run on this pool.
MEMORY_SMALL_POOL = env("MEMORY_SMALL_POOL", default=INFERENCE_DEFAULT_POOL)
