"""Database work from async code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections


def _close_old_connections() -> None:
    # As Channels' database_sync_to_async does, but never inside an atomic block: a sync caller that reached us
    # through async_to_sync (a Celery task, a test) runs these in its own thread, on its open transaction.
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def database_sync_to_async(function: Callable[..., Any]) -> Any:
    """sync_to_async for database work, closing stale connections around it (outside transactions).

    The one database hop of the project's async code (Channels' own helper closes connections inside atomic
    blocks too, which breaks callers that reached async code from a transaction)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        _close_old_connections()
        try:
            return function(*args, **kwargs)
        finally:
            _close_old_connections()

    return sync_to_async(run, thread_sensitive=True)
