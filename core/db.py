"""Database work from async code."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from asgiref.sync import AsyncToSync, SyncToAsync, sync_to_async
from django.db import InterfaceError, OperationalError, connections

from core.conf import setting

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _close_old_connections() -> None:
    # As Channels' database_sync_to_async does, but never inside an atomic block: a sync caller that reached us
    # through async_to_sync (a Celery task, a test) runs these in its own thread, on its open transaction.
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


# What a connection the server dropped raises: Django's wrapped errors, or psycopg's own where a pool's checkout or
# reset raised them unwrapped.
_CONNECTION_LOST = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


def _check_idle_pooled() -> None:
    """After a hop's connection failed: test the pool's idle connections and replace the broken ones. The pool does
    not test a connection at checkout (DATABASE_HEALTH_CHECKS off: a round trip per hop), so when the server dropped
    every connection (a restart, a failover), each idle one would otherwise fail the next hop that borrows it."""
    for connection in connections.all(initialized_only=True):
        pool = getattr(connection, "pool", None)
        if pool is not None:
            with contextlib.suppress(Exception):  # the hop's own error is the one to raise
                pool.check()


def _parallel_executor() -> ThreadPoolExecutor | None:
    """The process's database threads, when hops may run side by side: PostgreSQL (each thread borrows its own
    connection from the pool) and DATABASE_THREADS > 1. None: one thread for all hops (SQLite's single writer)."""
    global _executor
    threads = setting("DATABASE_THREADS")
    if threads <= 1 or connections["default"].vendor != "postgresql":
        return None
    if _executor is None:
        with _executor_lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="db")
    return _executor


def _bound_to_a_thread(loop: asyncio.AbstractEventLoop) -> bool:
    """A sync caller waits above us (async_to_sync: a Celery task, a test, maybe in an open transaction), or a
    request's thread-sensitive context is active: the work must run on that caller's thread."""
    return (
        getattr(AsyncToSync.executors, "current", None) is not None
        or SyncToAsync.thread_sensitive_context.get(None) is not None
        or loop in AsyncToSync.loop_thread_executors
    )


def database_sync_to_async(function: Callable[..., Any]) -> Any:
    """sync_to_async for database work, closing stale connections around it (outside transactions).

    The one database hop of the project's async code (Channels' own helper closes connections inside atomic
    blocks too, which breaks callers that reached async code from a transaction). Under Daphne on PostgreSQL hops
    run on DATABASE_THREADS threads side by side (a turn's hop does not wait behind another socket's); called
    from a sync caller's thread, or on SQLite, on that one thread as before."""

    def run(*args: Any, **kwargs: Any) -> Any:
        _close_old_connections()
        try:
            return function(*args, **kwargs)
        finally:
            _close_old_connections()

    def run_pooled(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except _CONNECTION_LOST:
            _check_idle_pooled()
            raise
        finally:
            # This thread serves every hop: give the connection back to the pool now, not when it looks stale.
            for connection in connections.all(initialized_only=True):
                if not connection.in_atomic_block:
                    connection.close()

    shared = sync_to_async(run, thread_sensitive=True)

    async def hop(*args: Any, **kwargs: Any) -> Any:
        executor = _parallel_executor()
        if executor is None or _bound_to_a_thread(asyncio.get_running_loop()):
            return await shared(*args, **kwargs)
        return await sync_to_async(run_pooled, thread_sensitive=False, executor=executor)(*args, **kwargs)

    return hop
