"""The project's own settings, each declared once here: its name (also its environment variable), type, default and
what it is for.

config/settings.py reads every one of them from the environment in one loop (`from_environment`); code reads a value
with `setting(name)`, which also works where a setting was left out (a test settings module, a management command
run with other settings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings


@dataclass(frozen=True)
class Setting:
    """One project setting. `kind` names the django-environ reader of its environment variable ("str", "int",
    "float", "bool", "list"); None: not read from the environment (a settings module may still set it)."""

    name: str
    kind: str | None
    default: Any
    doc: str

    def read(self, env: Any) -> Any:
        """The value of this setting in the environment `env` (an environ.Env), else its default."""
        return getattr(env, self.kind)(self.name, default=self.default)


SETTINGS: tuple[Setting, ...] = (
    # --- Agents and tools (docs/tools.md, docs/tools-loop.md) ---
    Setting("AGENT_MAX_TOOL_ITERATIONS", "int", 6, "Rounds of tool calls in one turn before the loop gives up."),
    Setting("AGENT_TOOL_TIMEOUT", "float", 30.0, "Seconds one tool call may run."),
    Setting("HTTP_TOOL_TIMEOUT", "float", 10.0, "The http_request tool: total seconds per request."),
    Setting("HTTP_TOOL_MAX_BYTES", "int", 1_000_000, "The http_request tool: the largest response body it reads."),
    Setting(
        "HTTP_TOOL_BLOCKED_NETWORKS",
        "list",
        [],
        "The networks the http_request tool never reaches, comma-separated CIDRs; empty: every range that is not the "
        "public internet (agents/tools/http.py). Tests unblock loopback to reach a local server.",
    ),
    # --- MCP (docs/mcp.md): tenants' MCP servers, and the platform served as one ---
    Setting(
        "MCP_ALLOW_PRIVATE_URLS",
        "bool",
        False,
        "Whether any tenant's MCP server may be at a private or loopback address; otherwise the platform operator "
        "allows it per server in the admin.",
    ),
    Setting(
        "MCP_TOOL_MAX_CHARS",
        "int",
        20_000,
        "The longest MCP tool result handed to a model, in characters; a longer one is cut, with a note saying so.",
    ),
    Setting(
        "MCP_RESULT_MAX_BYTES",
        "int",
        1_000_000,
        "The most bytes of one answer (or stream event) of an MCP server's tool call read; a result over it is cut "
        "there, with a note, not failed.",
    ),
    Setting(
        "MCP_LIST_MAX_BYTES",
        "int",
        2_000_000,
        "The most bytes of an MCP server's tool list read, its pages together; tools past it are not kept.",
    ),
    Setting("MCP_LIST_MAX_TOOLS", "int", 500, "The most tools kept of one MCP server; the rest are dropped."),
    Setting(
        "MCP_TOOL_NAME_MAX_CHARS",
        "int",
        128,
        "An MCP tool's longest name (at most 200); a tool with a longer one is dropped.",
    ),
    Setting(
        "MCP_TOOL_DESCRIPTION_MAX_CHARS",
        "int",
        8_000,
        "An MCP tool's longest description kept, in characters; a longer one is shortened.",
    ),
    Setting(
        "MCP_TOOL_SCHEMA_MAX_BYTES",
        "int",
        50_000,
        "An MCP tool's largest input schema, in bytes of JSON; a tool with a larger one is dropped.",
    ),
    Setting(
        "MCP_TOOL_SCHEMA_MAX_DEPTH",
        "int",
        32,
        "An MCP tool's input schema's deepest nesting of objects and arrays; a tool with a deeper one is dropped.",
    ),
    # --- Plans (docs/plans.md) ---
    Setting("PLAN_MAX_CONCURRENCY", "int", 4, "Steps run at once when a plan allows concurrency."),
    Setting(
        "PLAN_ASK_TIMEOUT_SECONDS",
        "float",
        600.0,
        'Seconds a step\'s question waits for the user before the plan resumes with "the user has not replied" '
        "(0: forever).",
    ),
    Setting(
        "PLAN_ASK_TIMEOUT_IN_PROCESS",
        "bool",
        True,
        "In eager mode (no worker), a timer thread of the process enforces PLAN_ASK_TIMEOUT_SECONDS.",
    ),
    # --- Models (llm/) ---
    Setting(
        "LLM_ALLOW_PRIVATE_BASE_URLS",
        "bool",
        False,
        "Whether any provider's base URL may be a private or loopback address (a local Ollama or vLLM); otherwise "
        "the platform operator allows it per provider in the admin.",
    ),
    Setting(
        "LLM_KEY_ENCRYPTION_KEY",
        "list",
        [],
        "Fernet keys of provider API keys at rest (the first encrypts, all decrypt: rotation); empty: a key derived "
        "from SECRET_KEY with HKDF (changing SECRET_KEY then makes stored keys unreadable).",
    ),
    Setting(
        "LLM_RETRY_BASE_DELAY",
        "float",
        0.5,
        "First delay of a model call's retry backoff in seconds (doubles per retry, with jitter).",
    ),
    Setting("LLM_RETRY_MAX_DELAY", "float", 8.0, "The largest delay of a model call's retry backoff in seconds."),
    Setting(
        "LLM_QUOTA_CACHE_SECONDS",
        "float",
        5.0,
        "How long a process may trust its own tally of a tenant's monthly tokens before re-reading the database "
        "(0: before every call; see llm/quota.py).",
    ),
    Setting(
        "OPENAI_API_KEY",
        "str",
        "",
        "A real provider's key for the demo tenants (seed_demo); with neither it nor OPENAI_BASE_URL, the offline "
        "demo model.",
    ),
    Setting("OPENAI_BASE_URL", "str", "", "A real provider's base URL for the demo tenants (seed_demo)."),
    Setting("OPENAI_MODEL", "str", "gpt-4o-mini", "The demo tenants' model at that provider."),
    # --- Chat under load (docs/operations.md) ---
    Setting(
        "CHAT_STREAM_PREFIX",
        "str",
        "chat",
        "The chat frame log's key prefix in Redis (processes sharing it share conversations' frames; tests use a "
        "fresh one per test).",
    ),
    Setting("CHAT_FLUSH_SECONDS", "float", 0.03, "Seconds a reply's later deltas wait to be written together."),
    Setting("CHAT_MAX_TURNS", "int", 200, "Turns a process runs at once (0: no limit)."),
    Setting(
        "CHAT_TURN_QUEUE",
        "int",
        400,
        "Turns that may wait for a free place beyond CHAT_MAX_TURNS; more are refused as busy.",
    ),
    Setting("CHAT_BUSY_RETRY_SECONDS", "int", 10, "The retry hint, in seconds, of a turn refused as busy."),
    Setting(
        "CHAT_USER_MESSAGES_PER_MINUTE",
        "int",
        30,
        "Messages one member may send per minute from the pages (the chat page, the REST API with the session); API "
        "keys have API_KEY_RATE, website visitors their embed's own rate; 0: no limit.",
    ),
    Setting(
        "CHAT_TURN_LEASE_SECONDS",
        "int",
        60,
        "Seconds a running turn's claim lasts unless its process renews it: after a process dies, its turns are "
        "ended as interrupted by another process within about this long (engine.interrupted.end_interrupted_turns).",
    ),
    Setting(
        "REDIS_MAX_CONNECTIONS",
        "int",
        50,
        "Redis connections of the frame log per process and event loop.",
    ),
    Setting("REDIS_POOL_TIMEOUT", "float", 10.0, "Seconds a caller waits for a free connection of the frame log."),
    Setting("REDIS_SOCKET_TIMEOUT", "float", 15.0, "Seconds of a Redis command or connect, for every Redis client."),
    Setting(
        "DATABASE_THREADS",
        "int",
        8,
        "Threads of a process that run database work of async code side by side on PostgreSQL (1: one thread); "
        "keep it below DATABASE_POOL_MAX_SIZE so that page requests find a connection too.",
    ),
    # --- Request bodies, bounded while Daphne reads them (config.body_limit): 413 above these ---
    Setting(
        "REQUEST_MAX_UPLOAD_BYTES",
        "int",
        110_000_000,
        "The largest upload to a knowledge base (several files of KNOWLEDGE_MAX_UPLOAD_BYTES each), of a "
        "conversation's file, and of a /v1 request (which carries its files inline, base64).",
    ),
    Setting("REQUEST_MAX_BYTES", "int", 10_000_000, "The largest body of every other request."),
    # --- The API (docs/api.md) ---
    Setting(
        "API_KEY_RATE",
        "str",
        "600/min",
        "Requests per API key on the REST API and the OpenAI-compatible endpoint (DRF's rate format), counted in "
        "the cache.",
    ),
    Setting(
        "API_TENANT_MAX_STREAMS",
        "int",
        20,
        "Streamed replies one tenant's keys may have open at once, counted across processes (0: no limit).",
    ),
    Setting("API_TENANT_MAX_KEYS", "int", 50, "Active (not revoked, not expired) API keys a tenant may have."),
    # --- Website widget (docs/embed.md) ---
    Setting(
        "WIDGET_TICKET_SECONDS",
        "int",
        86400,
        "How long a widget frame's signed ticket opens the visitor's chat and socket; then the frame loads again "
        "(and its host page's origin is checked again).",
    ),
    Setting(
        "WIDGET_NEW_VISITORS_PER_ADDRESS",
        "int",
        20,
        "New website visitors (first messages) one address may make per hour through one embed token (0: no limit).",
    ),
    Setting(
        "WIDGET_NEW_VISITORS_PER_TOKEN",
        "int",
        2000,
        "New website visitors (first messages) one embed token takes per hour, from all addresses (0: no limit).",
    ),
    Setting(
        "MCP_ALLOWED_ORIGINS",
        "list",
        [],
        "Browser origins (scheme://host[:port]) besides this site's own hosts whose pages may call /mcp; a request "
        "with any other Origin header is refused (programs send none).",
    ),
    # --- Files and images in conversations (docs/attachments.md) ---
    Setting("ATTACHMENT_MAX_BYTES", "int", 20 * 1024 * 1024, "The largest file a conversation accepts."),
    Setting("ATTACHMENTS_PER_MESSAGE", "int", 5, "The most files one message may carry."),
    Setting("ATTACHMENTS_PER_CONVERSATION", "int", 50, "The most files one conversation may hold."),
    Setting(
        "ATTACHMENT_MAX_PIXELS",
        "int",
        50_000_000,
        "The most pixels an image may have (a decompression bomb is refused from its header).",
    ),
    Setting(
        "ATTACHMENT_INLINE_TOKENS",
        "int",
        3000,
        "A document up to this many tokens goes to the model whole with its message; a larger one is cut and "
        "indexed for its conversation, and each turn gets its best passages.",
    ),
    Setting("ATTACHMENT_PASSAGES", "int", 4, "The passages of a conversation's large documents given to each turn."),
    Setting(
        "ATTACHMENT_RETENTION_DAYS",
        "int",
        0,
        "Files older than this many days are deleted (their messages stay, saying the file is gone); 0: kept as "
        "long as their conversation.",
    ),
    Setting(
        "ATTACHMENT_STORAGE_ROOT",
        "str",
        "",
        'The directory conversations\' files are stored in ("": <VAR_DIR>/attachments); an S3-compatible store is '
        'configured in config/settings.py\'s STORAGES["attachments"] instead (docs/attachments.md).',
    ),
    Setting(
        "ATTACHMENT_URL_BLOCKED_NETWORKS",
        "list",
        [],
        "The networks an image_url part's http(s) URL may never reach, comma-separated CIDRs; empty: every range that "
        "is not the public internet (core.netguard). Tests unblock loopback to reach a local server.",
    ),
    Setting("ATTACHMENT_URL_TIMEOUT", "float", 10.0, "Seconds an image_url part's http(s) URL may take to download."),
    # --- Knowledge bases (docs/knowledge.md) ---
    Setting("KNOWLEDGE_MAX_UPLOAD_BYTES", "int", 20 * 1024 * 1024, "The largest file a knowledge base accepts."),
    Setting("KNOWLEDGE_EMBED_THREADS", "int", 0, "The local embedder's threads (0: the CPUs this process may use)."),
    Setting(
        "KNOWLEDGE_MODEL_DIR",
        "str",
        "",
        "Where the local embedders' models, built from the installed weights on first use, are cached "
        '("": <temp dir>/agentplat-models).',
    ),
    Setting(
        "KNOWLEDGE_STALLED_AFTER_SECONDS",
        "int",
        600,
        "A document with no progress for this long shows as stalled, with a re-ingest button.",
    ),
    Setting(
        "KNOWLEDGE_INGEST_IN_THREAD",
        "bool",
        True,
        "With eager Celery (no worker), ingest on background threads of the web process so uploads answer at once.",
    ),
    Setting(
        "KNOWLEDGE_MAX_UNPACKED_BYTES",
        "int",
        100_000_000,
        "The bytes inside a .docx one document may unpack to (knowledge.parsing.check_limits).",
    ),
    Setting("KNOWLEDGE_MAX_PAGES", "int", 2000, "The PDF pages one document may have."),
    Setting("KNOWLEDGE_MAX_CHARACTERS", "int", 5_000_000, "The characters of text one document may become."),
    Setting("KNOWLEDGE_MAX_CHUNKS", "int", 20_000, "The chunks one document may become."),
    Setting(
        "KNOWLEDGE_INGEST_THREADS",
        "int",
        2,
        "The embedded default's ingestion threads: documents of different tenants ingest side by side (one at a "
        "time per tenant).",
    ),
    Setting(
        "KNOWLEDGE_RERANK_BUDGET_MS",
        "float",
        300.0,
        "The most a search's re-ranking may spend embedding candidates (knowledge.rerank).",
    ),
    Setting(
        "KNOWLEDGE_INGEST_SLICE_SECONDS",
        "float",
        5.0,
        "On Celery workers: seconds of embedding one ingestion task does before it queues the rest behind what "
        "else waits (0: a whole document per task).",
    ),
    Setting(
        "KNOWLEDGE_OWN_INDEX_MIN_CHUNKS",
        "int",
        5_000,
        "On pgvector: chunks of one dimension from which a knowledge base gets its own HNSW index besides the "
        "shared one (knowledge.vectorstore.ensure_own_index; 0: never).",
    ),
    # --- Long-term memory (docs/memory.md) ---
    Setting(
        "MEMORY_GAP_SECONDS",
        "float",
        3600.0,
        "Seed 3's gap at level 0: a memory recalled after more than its gap (MEMORY_GAP_SECONDS * "
        "MEMORY_GAP_FACTOR ** level) rises a level.",
    ),
    Setting("MEMORY_GAP_FACTOR", "float", 2.0, "The growth of a memory's gap per level."),
    Setting("MEMORY_LEVEL_CAP", "int", 8, "The level at which a memory is long-term and fixed."),
    Setting("MEMORY_RECALL_CANDIDATES", "int", 10, "recall(query): candidates retrieved."),
    Setting("MEMORY_RECALL_TOP_N", "int", 3, "recall(query): memories returned."),
    Setting("MEMORY_SLEEP_SAMPLE", "int", 20, "sleep(): memories drawn per memory key."),
    Setting("MEMORY_EVENTS_TOP_K", "int", 10, "Before a turn: events retrieved."),
    Setting(
        "MEMORY_EMBEDDER",
        "str",
        "auto",
        'The local models that embed long-term memory: "auto" (each text by the model for its language: English '
        'all-MiniLM-L6-v2 for Latin script, multilingual-e5-small otherwise), "local" (MiniLM for everything) or '
        '"local_multilingual" (e5 for everything); rows embedded otherwise are found by keyword until '
        "`reembed_memory`.",
    ),
    Setting("MEMORY_EXPAND_DEPTH", "int", 2, "Before a turn: hops followed along the retrieved events' relations."),
    Setting("MEMORY_TURNS_TOP_K", "int", 3, "Before a turn: old turns recalled."),
    Setting(
        "MEMORY_RECALL_TOKENS",
        "int",
        800,
        "Before a turn: the fewest tokens all of it may take in the system message (all of them when the model's "
        "window is unknown or MEMORY_RECALL_SHARE is 0).",
    ),
    Setting(
        "MEMORY_RECALL_SHARE",
        "float",
        0.04,
        "Before a turn: the share of the model's context window all of it may take (between MEMORY_RECALL_TOKENS "
        "and MEMORY_RECALL_MAX_TOKENS; 0: MEMORY_RECALL_TOKENS alone).",
    ),
    Setting(
        "MEMORY_RECALL_MAX_TOKENS",
        "int",
        1600,
        "Before a turn: the most tokens all of it may take, whatever the model's window.",
    ),
    Setting(
        "MEMORY_EXTRACT_IN_THREAD",
        "bool",
        True,
        "The embedded default (Celery eager): extraction runs on a background thread after the reply, not in the turn.",
    ),
    # --- The long-lived goal agent (agents/goal): a run's limits, prefilled on its start page and the most an
    # operator may set there ---
    Setting("GOAL_MAX_ITERATIONS", "int", 50, "A goal run's model iterations."),
    Setting("GOAL_MAX_TOKENS_PER_HOUR", "int", 200_000, "A goal run's tokens in any hour."),
    Setting("GOAL_MAX_WALL_SECONDS", "int", 3600, "A goal run's seconds from start to end."),
    Setting(
        "GOAL_ASK_TIMEOUT_SECONDS",
        "float",
        300.0,
        "The longest a goal run's question to the user waits (the model names its wait, up to this).",
    ),
    Setting(
        "GOAL_ITERATIONS_PER_TASK",
        "int",
        5,
        "Iterations one Celery task of a goal run runs before it queues the next (a worker is never held for a "
        "whole run, and Stop is seen).",
    ),
    # --- Evaluation (evals; docs/evaluation.md) ---
    Setting(
        "EVAL_MAX_CONCURRENCY",
        "int",
        8,
        "The most cases of one evaluation run that run at once (a run asks for its own number, up to this).",
    ),
    # --- Traces (OpenTelemetry, core/tracing.py; docs/observability.md). Where spans go is the standard
    # OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT / _HEADERS, read by the exporter itself ---
    Setting(
        "TRACES_ENABLED",
        "bool",
        False,
        "Send a span per turn, model call, tool call, retrieval, memory recall and plan step over OTLP/HTTP.",
    ),
    Setting(
        "TRACES_CAPTURE_CONTENT",
        "bool",
        False,
        "Traces carry prompt and reply text, tool arguments and results, queries and feedback comments.",
    ),
)

DEFAULTS: dict[str, Any] = {declared.name: declared.default for declared in SETTINGS}


def from_environment(env: Any) -> dict[str, Any]:
    """Every setting read from the environment `env` (an environ.Env), by name: config/settings.py's one reader."""
    return {declared.name: declared.read(env) for declared in SETTINGS if declared.kind is not None}


def setting(name: str) -> Any:
    """The value of the project setting `name`: as configured, else its declared default."""
    return getattr(settings, name, DEFAULTS[name])
