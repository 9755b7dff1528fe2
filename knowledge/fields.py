"""The embedding column: pgvector's `vector` where the database has the extension, float32 bytes elsewhere.

The column type is chosen when the migration runs (`db_type` asks the connection), so one model serves SQLite,
PostgreSQL without pgvector and PostgreSQL with it. Python always sees a tuple of floats or None. Vectors of
different dimensions share the column (an untyped `vector`); the HNSW indexes are partial, one per dimension
(knowledge.vectorstore creates them).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

_has_pgvector: dict[str, bool] = {}


def pgvector_installed(connection: BaseDatabaseWrapper) -> bool:
    """True when `connection` is PostgreSQL with the `vector` extension installed in its database (cached)."""
    if connection.vendor != "postgresql":
        return False
    key = f"{connection.alias}:{connection.settings_dict.get('NAME')}"
    if key not in _has_pgvector:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
            _has_pgvector[key] = cursor.fetchone() is not None
    return _has_pgvector[key]


def forget_pgvector_state() -> None:
    """Forget what was learnt about the extension (after it is created, and between test databases)."""
    _has_pgvector.clear()


def column_is_vector(connection: BaseDatabaseWrapper, table: str, column: str) -> bool:
    """True when the column was created as pgvector's `vector` (what the migration chose)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT udt_name FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
            [table, column],
        )
        row = cursor.fetchone()
    return bool(row and row[0] == "vector")


def pack_vector(values: Sequence[float] | np.ndarray) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def unpack_vector(data: bytes | memoryview) -> tuple[float, ...]:
    data = bytes(data)
    return struct.unpack(f"<{len(data) // 4}f", data)


def vector_literal(values: Sequence[float] | np.ndarray) -> str:
    """pgvector's text form: [1,2,3]."""
    return "[" + ",".join(map(repr, np.asarray(values, dtype=np.float64).tolist())) + "]"


class EmbeddingField(models.Field):
    """A vector of floats of any dimension; see the module docstring."""

    description = "embedding vector"

    def db_type(self, connection: BaseDatabaseWrapper) -> str:
        if connection.vendor == "postgresql":
            return "vector" if pgvector_installed(connection) else "bytea"
        if connection.vendor == "sqlite":
            return "blob"
        return "longblob" if connection.vendor == "mysql" else "blob"

    def _is_vector(self, connection: BaseDatabaseWrapper) -> bool:
        return column_is_vector_cached(connection, self.model._meta.db_table, self.column)

    def get_db_prep_value(self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False) -> Any:
        if value is None:
            return None
        if isinstance(value, bytes | memoryview):
            value = unpack_vector(value)
        if self._is_vector(connection):
            return vector_literal(value)
        return pack_vector(value)

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> tuple[float, ...] | None:
        if value is None:
            return None
        if isinstance(value, str):  # pgvector's text output: [1,2,3]
            return tuple(float(v) for v in value.strip("[]").split(",") if v)
        return unpack_vector(value)

    def to_python(self, value: Any) -> tuple[float, ...] | None:
        if value is None or isinstance(value, tuple):
            return value
        if isinstance(value, bytes | memoryview):
            return unpack_vector(value)
        if isinstance(value, str):
            return tuple(float(v) for v in value.strip("[]").split(",") if v)
        return tuple(float(v) for v in value)


_column_is_vector: dict[tuple[str, str, str, str], bool] = {}


def column_is_vector_cached(connection: BaseDatabaseWrapper, table: str, column: str) -> bool:
    key = (connection.alias, str(connection.settings_dict.get("NAME")), table, column)
    if key not in _column_is_vector:
        _column_is_vector[key] = column_is_vector(connection, table, column)
    return _column_is_vector[key]


def forget_column_state() -> None:
    _column_is_vector.clear()
    forget_pgvector_state()
