"""The ASGI application bench/load_ws.py runs under Daphne: the platform's own (config.asgi) plus a stats endpoint.

    .venv/bin/daphne -b 127.0.0.1 -p 8001 bench.load_asgi:application     # from the repository root

`GET /_bench/stats` answers JSON {pid, queries, threads, settings}: `queries` counts every SQL statement this process
has executed (an execute wrapper added to each database connection as it is created), `settings` the effective
values of the project's load settings (core.conf). `?gc=1` runs a garbage collection first (for memory readings).
Every other request goes to the platform unchanged.

Project settings that the settings module does not set (core.conf declares some without an environment variable,
such as PLAN_MAX_CONCURRENCY) are taken from the environment here when set there, so that a bench run can compare
values without editing the settings module.

Needs: what bench/load_ws.py gives the processes it starts: DATABASE_URL (migrated), REDIS_URL, DJANGO_SECRET_KEY
and the other settings of its bench_environment, and `make install`.
"""

from __future__ import annotations

import gc
import json
import os
import threading
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.conf import settings
from django.db.backends.signals import connection_created

from config.asgi import application as platform_application
from core.conf import DEFAULTS, setting

STATS_PATH = "/_bench/stats"
REPORTED_SETTINGS = (
    "CHAT_STREAM_PREFIX",
    "CHAT_FLUSH_SECONDS",
    "CHAT_MAX_TURNS",
    "CHAT_TURN_QUEUE",
    "CHAT_BUSY_RETRY_SECONDS",
    "REDIS_MAX_CONNECTIONS",
    "REDIS_POOL_TIMEOUT",
    "REDIS_SOCKET_TIMEOUT",
    "LLM_QUOTA_CACHE_SECONDS",
)

_lock = threading.Lock()
_queries = 0
from_environment: dict[str, str] = {}


def _coerce(raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    if isinstance(default, list):
        return [part.strip() for part in raw.split(",") if part.strip()]
    return raw


for _name, _default in DEFAULTS.items():
    if _name in os.environ and not hasattr(settings, _name):
        setattr(settings, _name, _coerce(os.environ[_name], _default))
        from_environment[_name] = os.environ[_name]


def _count_statement(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
    global _queries
    with _lock:
        _queries += 1
    return execute(sql, params, many, context)


def _on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    # The same DatabaseWrapper reconnects (CONN_MAX_AGE=0: once per database hop): add the counter only once.
    if _count_statement not in connection.execute_wrappers:
        connection.execute_wrappers.append(_count_statement)


connection_created.connect(_on_connection_created, weak=False, dispatch_uid="bench-load-asgi-query-counter")


def stats(collect: bool = False) -> dict[str, Any]:
    """What /_bench/stats answers."""
    if collect:
        gc.collect()
    with _lock:
        queries = _queries
    return {
        "pid": os.getpid(),
        "queries": queries,
        "threads": threading.active_count(),
        "settings": {name: setting(name) for name in REPORTED_SETTINGS if name in DEFAULTS},
        "from_environment": from_environment,
    }


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The platform's ASGI application, with GET /_bench/stats answered here."""
    if scope["type"] == "http" and scope.get("path") == STATS_PATH:
        body = json.dumps(stats(collect=b"gc=1" in scope.get("query_string", b""))).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return
    await platform_application(scope, receive, send)
