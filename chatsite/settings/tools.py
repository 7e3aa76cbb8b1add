"""Tool settings (DESIGN §13: the tool registry and its built-in tools), kept apart
from base.py, which star-imports them. Values come from the same django-environ
``env``; docs/tools.md explains each limit."""

from chatsite.settings.environment import env

# --- run_python: Python in a bubblewrap sandbox (tools/sandbox.py) -------------------
# The uid/gid the sandboxed code runs as when the launcher is root (setpriv drops to
# them before bwrap starts); default nobody/nogroup. A launcher that is not root runs
# the sandbox as its own uid: RLIMIT_NPROC then counts that uid's other processes too.
TOOLS_SANDBOX_UID = env.int("TOOLS_SANDBOX_UID", default=65534)
TOOLS_SANDBOX_GID = env.int("TOOLS_SANDBOX_GID", default=65534)
# Debian's interpreter (not the virtualenv's): only /usr is visible in the sandbox.
TOOLS_SANDBOX_PYTHON = env("TOOLS_SANDBOX_PYTHON", default="/usr/bin/python3")
# Wall-clock limit of one run, s: then the whole sandbox is killed.
TOOLS_SANDBOX_WALL_S = env.float("TOOLS_SANDBOX_WALL_S", default=10.0)
# CPU time of each process in it, s (RLIMIT_CPU; SIGKILL one second later).
TOOLS_SANDBOX_CPU_S = env.int("TOOLS_SANDBOX_CPU_S", default=5)
# Address space of each process, bytes (RLIMIT_AS).
TOOLS_SANDBOX_MEMORY_BYTES = env.int("TOOLS_SANDBOX_MEMORY_BYTES", default=256 << 20)
# Processes and threads of the sandbox uid (RLIMIT_NPROC).
TOOLS_SANDBOX_PROCESSES = env.int("TOOLS_SANDBOX_PROCESSES", default=64)
# Largest file the code may write, bytes (RLIMIT_FSIZE).
TOOLS_SANDBOX_FILE_BYTES = env.int("TOOLS_SANDBOX_FILE_BYTES", default=16 << 20)
# Size of each writable tmpfs (/scratch, which /tmp points to, and /dev/shm), bytes.
TOOLS_SANDBOX_DISK_BYTES = env.int("TOOLS_SANDBOX_DISK_BYTES", default=64 << 20)
# Open files of each process (RLIMIT_NOFILE).
TOOLS_SANDBOX_OPEN_FILES = env.int("TOOLS_SANDBOX_OPEN_FILES", default=64)
# stdout and stderr are each kept up to this many bytes, then cut with a note.
TOOLS_SANDBOX_OUTPUT_BYTES = env.int("TOOLS_SANDBOX_OUTPUT_BYTES", default=64 << 10)
# Largest program accepted, bytes (UTF-8).
TOOLS_SANDBOX_CODE_BYTES = env.int("TOOLS_SANDBOX_CODE_BYTES", default=256 << 10)

# --- fetch_url: a web page as text (tools/fetch.py) ---------------------------------
# Addresses the fetcher may reach although they are not public (loopback, private,
# link-local): CIDR blocks, single addresses or exact host names, comma-separated.
TOOLS_FETCH_ALLOW = env.list("TOOLS_FETCH_ALLOW", default=[])
# Wall-clock limit of one fetch, redirects included, s.
TOOLS_FETCH_TIMEOUT_S = env.float("TOOLS_FETCH_TIMEOUT_S", default=10.0)
# Bytes of a response body read at most; the rest is not downloaded.
TOOLS_FETCH_MAX_BYTES = env.int("TOOLS_FETCH_MAX_BYTES", default=2 << 20)
# Characters of text returned at most (HTML is turned into text first).
TOOLS_FETCH_MAX_CHARS = env.int("TOOLS_FETCH_MAX_CHARS", default=20_000)
# Redirects followed at most; each hop's address is checked again.
TOOLS_FETCH_MAX_REDIRECTS = env.int("TOOLS_FETCH_MAX_REDIRECTS", default=5)
TOOLS_FETCH_USER_AGENT = env(
    "TOOLS_FETCH_USER_AGENT", default="chatsite-fetch/1 (+fetch_url tool)"
)
# PEM file of certificate authorities to trust (an internal CA) instead of certifi's.
TOOLS_FETCH_CA_FILE = env("TOOLS_FETCH_CA_FILE", default="")

# --- the registry (tools/registry.py) ------------------------------------------------
# Characters of a tool's result the model reads at most; the rest is cut with a note.
TOOLS_OUTPUT_CHARS = env.int("TOOLS_OUTPUT_CHARS", default=20_000)

# --- web_search: SearxNG's JSON API (tools/search.py) --------------------------------
# The SearxNG base URL (its /search must allow format=json); empty: web_search is off.
TOOLS_SEARCH_URL = env("TOOLS_SEARCH_URL", default="")
TOOLS_SEARCH_TIMEOUT_S = env.float("TOOLS_SEARCH_TIMEOUT_S", default=10.0)
# Results returned to the model at most, and characters of each snippet.
TOOLS_SEARCH_MAX_RESULTS = env.int("TOOLS_SEARCH_MAX_RESULTS", default=8)
TOOLS_SEARCH_SNIPPET_CHARS = env.int("TOOLS_SEARCH_SNIPPET_CHARS", default=400)
# Bytes of the backend's answer read at most.
TOOLS_SEARCH_MAX_BYTES = env.int("TOOLS_SEARCH_MAX_BYTES", default=1 << 20)

# --- MCP servers (tools/mcp.py) -------------------------------------------------------
# Seconds a server's tool listing is reused before it is asked again.
TOOLS_MCP_LIST_TTL_S = env.float("TOOLS_MCP_LIST_TTL_S", default=60.0)
# Seconds a server that failed to list is left out before it is asked again.
TOOLS_MCP_RETRY_S = env.float("TOOLS_MCP_RETRY_S", default=15.0)
# Seconds to connect and list a server's tools; a server slower than that is skipped.
TOOLS_MCP_LIST_TIMEOUT_S = env.float("TOOLS_MCP_LIST_TIMEOUT_S", default=5.0)
# Wall-clock limit of one MCP tool call, s.
TOOLS_MCP_CALL_TIMEOUT_S = env.float("TOOLS_MCP_CALL_TIMEOUT_S", default=30.0)

# --- search_documents: the user's documents (gateway/tooling.py) ----------------------
# Passages returned at most.
TOOLS_DOCUMENTS_K = env.int("TOOLS_DOCUMENTS_K", default=5)
TOOLS_DOCUMENTS_TIMEOUT_S = env.float("TOOLS_DOCUMENTS_TIMEOUT_S", default=15.0)

# --- The chat's tool loop (conversations.services.turns.tools) -----------------------
# Rounds of tool calls one turn may make; the generation after the last round is
# offered no tools, so the model answers.
CHAT_TOOL_MAX_STEPS = env.int("CHAT_TOOL_MAX_STEPS", default=4)
# The tools offered to a user: a dotted path to ``provider(*, user) -> list of tools``
# (each with name, description, parameters, timeout_s and ``async run(arguments,
# context)``); the default is the tool registry's offer (tools/), "" offers none.
CHAT_TOOLS_PROVIDER = env(
    "CHAT_TOOLS_PROVIDER",
    default="conversations.services.turns.registry.registry_tools",
)
# Offer the user's tools (tool_choice "auto") on every turn. Off, tools are offered
# only on a turn whose message picks one (its first step must call it) and on that
# turn's later steps. The definitions are prompt tokens on every turn (the four
# built-ins: 516 with SmolLM2's template), so a model that does not choose tools by
# itself pays their prefill for nothing (chatsite/settings/dev.py).
CHAT_TOOLS_AUTO = env.bool("CHAT_TOOLS_AUTO", default=True)
# How long a tool step's state and the conversation's "tool running" mark live in
# Redis (seconds): longer than any tool's wall-clock limit.
CHAT_TOOL_STEP_TTL_S = env.int("CHAT_TOOL_STEP_TTL_S", default=600)
