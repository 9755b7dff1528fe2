"""Counting SQL statements across threads: async code runs its database work on another thread (core.db), where
django_assert_num_queries does not look."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from django.db.backends.utils import CursorWrapper

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
