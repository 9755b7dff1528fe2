"""Counting SQL statements across threads: async code runs its database work on another thread (core.db), where
django_assert_num_queries does not look."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from django.db.backends.utils import CursorWrapper

from core import db

_TRANSACTION_CONTROL = ("BEGIN", "SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")


class Statements:
    """The statements run while counting, from any thread and connection."""

    def __init__(self) -> None:
        self.sql: list[str] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.sql)

    def add(self, sql: str) -> None:
        if sql.startswith(_TRANSACTION_CONTROL):
            return  # SQLite's explicit BEGIN of an atomic block (PostgreSQL's is implicit): not work of its own
        with self._lock:
            self.sql.append(sql)


@contextmanager
def count_statements() -> Iterator[Statements]:
    """Count every statement executed through Django's cursors, whatever the thread, while active."""
    statements = Statements()
    execute = CursorWrapper._execute_with_wrappers

    def counting(self, sql, params, many, executor):
        statements.add(sql)
        return execute(self, sql, params, many, executor)

    with mock.patch.object(CursorWrapper, "_execute_with_wrappers", counting):
        yield statements


@contextmanager
def count_hops() -> Iterator[list[str]]:
    """The database hops of async code (core.db.database_sync_to_async) made while active, from any coroutine: the
    name of each hop's function, in order."""
    hops: list[str] = []
    convert = db.sync_to_async

    def counting(function, **kwargs):
        converted = convert(function, **kwargs)

        async def hop(*args, **call_kwargs):
            # run/run_pooled wrap the hop's own function: name that one.
            inner = next((c.cell_contents for c in function.__closure__ or () if callable(c.cell_contents)), function)
            hops.append(getattr(inner, "__qualname__", repr(inner)))  # on the event loop: no lock
            return await converted(*args, **call_kwargs)

        return hop

    with mock.patch.object(db, "sync_to_async", counting):
        yield hops
