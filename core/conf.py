"""The project's own settings, each default declared once here.

config/settings.py reads the environment with these defaults; code reads a value with `setting(name)`, which also
works where a setting was left out (a test settings module, a management command run with other settings).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Agents and tools (docs/tools.md, docs/tools-loop.md): rounds of tool calls in one turn before the loop gives
    # up; seconds one tool call may run.
    "AGENT_MAX_TOOL_ITERATIONS": 6,
    "AGENT_TOOL_TIMEOUT": 30.0,
    # The http_request tool: seconds per request, the largest body it reads, the networks it never reaches.
    "HTTP_TOOL_TIMEOUT": 10.0,
    "HTTP_TOOL_MAX_BYTES": 1_000_000,
    # None: the tool's own list of every range that is not the public internet (agents/tools/http.py).
    "HTTP_TOOL_BLOCKED_NETWORKS": None,
    # Plans: steps run at once when a plan allows concurrency; seconds a step's question waits for the user (0:
    # forever); in eager mode a timer thread of the process enforces that wait.
    "PLAN_MAX_CONCURRENCY": 4,
    "PLAN_ASK_TIMEOUT_SECONDS": 600.0,
    "PLAN_ASK_TIMEOUT_IN_PROCESS": True,
    # Models: whether any provider's base URL may be a private or loopback address (the platform operator's own
    # model servers; per provider, the operator can allow it in the admin instead).
    "LLM_ALLOW_PRIVATE_BASE_URLS": False,
    # Models: extra keys that decrypt stored provider keys; seconds a tenant's quota reading is cached.
    "LLM_KEY_ENCRYPTION_KEY": [],
    "LLM_QUOTA_CACHE_SECONDS": 5.0,
    # The chat frame log's key prefix in Redis (tests use a fresh one per test).
    "CHAT_STREAM_PREFIX": "chat",
    # Request bodies, bounded while Daphne reads them (config.body_limit): knowledge-base uploads, and the rest.
    "REQUEST_MAX_UPLOAD_BYTES": 110_000_000,
    "REQUEST_MAX_BYTES": 10_000_000,
    # Under load (docs/operations.md): seconds a streamed reply's deltas wait to be written together; turns a process
    # runs at once (0: no limit) and turns that may wait for a free place beyond that (more are refused as busy,
    # with a retry hint of CHAT_BUSY_RETRY_SECONDS).
    "CHAT_FLUSH_SECONDS": 0.03,
    "CHAT_MAX_TURNS": 200,
    "CHAT_TURN_QUEUE": 400,
    "CHAT_BUSY_RETRY_SECONDS": 10,
    # Seconds a running turn's claim lasts unless its process renews it: after a process dies, its turns are ended as
    # interrupted by another process within about this long (engine.turns.end_interrupted_turns).
    "CHAT_TURN_LEASE_SECONDS": 60,
    # The API (docs/api.md): streamed replies (/v1/chat/completions with stream, .../messages/stream/) one tenant's keys
    # may have open at once, counted across processes in the cache (0: no limit); active (not revoked, not expired)
    # keys a tenant may have.
    "API_TENANT_MAX_STREAMS": 20,
    "API_TENANT_MAX_KEYS": 50,
    # Threads of a process that run database work of async code side by side on PostgreSQL (1: one thread).
    "DATABASE_THREADS": 8,
    # Redis clients of the frame log: connections per process and event loop (a caller waits up to
    # REDIS_POOL_TIMEOUT seconds for a free one), and the timeout of a command and of a connect.
    "REDIS_MAX_CONNECTIONS": 50,
    "REDIS_POOL_TIMEOUT": 10.0,
    "REDIS_SOCKET_TIMEOUT": 15.0,
    # Knowledge bases (docs/knowledge.md).
    "KNOWLEDGE_MAX_UPLOAD_BYTES": 20 * 1024 * 1024,
    "KNOWLEDGE_EMBED_THREADS": 0,
    "KNOWLEDGE_MODEL_DIR": "",
    "KNOWLEDGE_STALLED_AFTER_SECONDS": 600,
    "KNOWLEDGE_INGEST_IN_THREAD": True,
    # What one document may become once unpacked and read (knowledge.parsing.check_limits): the bytes inside a
    # .docx, PDF pages, characters of text, chunks. A document over a limit fails with the reason on its row.
    "KNOWLEDGE_MAX_UNPACKED_BYTES": 100_000_000,
    "KNOWLEDGE_MAX_PAGES": 2000,
    "KNOWLEDGE_MAX_CHARACTERS": 5_000_000,
    "KNOWLEDGE_MAX_CHUNKS": 20_000,
    # The embedded default's ingestion threads: documents of different tenants ingest side by side (one at a time
    # per tenant), so one tenant's big document never holds back another tenant's small one.
    "KNOWLEDGE_INGEST_THREADS": 2,
    # The most a search's re-ranking may spend embedding candidates (knowledge.rerank).
    "KNOWLEDGE_RERANK_BUDGET_MS": 300.0,
    # On Celery workers: seconds of embedding one ingestion task does before it keeps its work and queues the rest
    # behind what else waits (0: a whole document per task).
    "KNOWLEDGE_INGEST_SLICE_SECONDS": 5.0,
    # On pgvector: chunks of one dimension from which a knowledge base gets its own HNSW index besides the shared one
    # (knowledge.vectorstore.ensure_own_index; 0: never).
    "KNOWLEDGE_OWN_INDEX_MIN_CHUNKS": 5_000,
    # Long-term memory (docs/memory.md). Seed 3's strength: a memory recalled after more than its gap rises a level;
    # the gap is MEMORY_GAP_SECONDS * MEMORY_GAP_FACTOR ** level; at MEMORY_LEVEL_CAP it is long-term and fixed.
    "MEMORY_GAP_SECONDS": 3600.0,
    "MEMORY_GAP_FACTOR": 2.0,
    "MEMORY_LEVEL_CAP": 8,
    # recall(query): candidates retrieved, memories returned; sleep(): memories drawn per memory key.
    "MEMORY_RECALL_CANDIDATES": 10,
    "MEMORY_RECALL_TOP_N": 3,
    "MEMORY_SLEEP_SAMPLE": 20,
    # Before a turn: events retrieved (then followed along relations up to the depth), old turns recalled, and the
    # tokens all of it may take in the system message.
    "MEMORY_EVENTS_TOP_K": 10,
    # The local model that embeds long-term memory: "local" (English all-MiniLM-L6-v2) or "local_multilingual"
    # (multilingual-e5-small). Rows embedded by the other model are found by keyword until `reembed_memory`.
    "MEMORY_EMBEDDER": "local",
    "MEMORY_EXPAND_DEPTH": 2,
    "MEMORY_TURNS_TOP_K": 3,
    "MEMORY_RECALL_TOKENS": 800,
    # The embedded default (Celery eager): extraction runs on a background thread after the reply, not in the turn.
    "MEMORY_EXTRACT_IN_THREAD": True,
    # The long-lived goal agent (agents/goal): a run's limits, prefilled on its start page and the most an operator
    # may set there: model iterations, tokens in any hour, seconds from start to end; the longest a question to the
    # user waits (the model names its wait, up to this); iterations one task runs before it queues the next.
    "GOAL_MAX_ITERATIONS": 50,
    "GOAL_MAX_TOKENS_PER_HOUR": 200_000,
    "GOAL_MAX_WALL_SECONDS": 3600,
    "GOAL_ASK_TIMEOUT_SECONDS": 300.0,
    "GOAL_ITERATIONS_PER_TASK": 5,
}


def setting(name: str) -> Any:
    """The value of the project setting `name`: as configured, else its declared default."""
    return getattr(settings, name, DEFAULTS[name])
