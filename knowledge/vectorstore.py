"""Vector search behind one interface (K4): pgvector's HNSW index where the embedding column is a `vector`, an exact
in-process search everywhere else (SQLite, PostgreSQL without the extension).

Both backends search one knowledge base's chunks embedded with a given model (`Chunk.embedding_model`, the
embedder's `model`) and dimension, through the tenant-scoped manager, and return cosine similarities.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from django.db import connections, router, transaction
from django.db.models import FloatField, Func, Value

from core.cache import LRUCache
from core.conf import setting
from knowledge.fields import column_is_vector_cached, vector_literal
from knowledge.models import Chunk, KnowledgeBase

# HNSW's candidate list when searching: the default (40) caps what one scan can return; iterative scans
# (pgvector >= 0.8) go on past it when the knowledge-base and tenant filters drop rows.
HNSW_EF_SEARCH = 100
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64

logger = logging.getLogger(__name__)


def _database_key() -> tuple[str, str]:
    alias = router.db_for_read(Chunk)
    return alias, str(connections[alias].settings_dict.get("NAME"))


class VectorBackend:
    """Nearest chunks of one knowledge base by cosine similarity."""

    name: str

    def search(
        self, knowledge_base: KnowledgeBase, *, model: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) of the `k` nearest chunks embedded with `model`, nearest first."""
        raise NotImplementedError

    def similarities(
        self, knowledge_base: KnowledgeBase, *, model: str, vector: np.ndarray, chunk_ids: Sequence[int]
    ) -> dict[int, float]:
        """Cosine similarity of the given chunks to `vector` (chunks without a matching embedding are left out)."""
        raise NotImplementedError


class _Matrix:
    __slots__ = ("ids", "matrix", "revision", "rows")

    def __init__(self, ids: np.ndarray, matrix: np.ndarray, revision: int) -> None:
        self.ids = ids
        self.matrix = matrix
        self.revision = revision
        self.rows = {int(chunk_id): row for row, chunk_id in enumerate(ids)}


class ExactBackend(VectorBackend):
    """Every chunk's vector in one float32 matrix per (knowledge base, model); a query is one product. After a
    change (the revision moved) only the difference is read: the chunk ids, and the vectors of new chunks."""

    name = "exact"

    def __init__(self, cache_size: int = 16) -> None:
        self._cache = LRUCache(cache_size)
        self._lock = threading.Lock()

    def _matrix(self, knowledge_base: KnowledgeBase, model: str, dimension: int) -> _Matrix:
        key = (*_database_key(), knowledge_base.pk, model, dimension)
        cached = self._cache.get(key)
        if cached is not None and cached.revision == knowledge_base.revision:
            return cached
        with self._lock:  # one refresh at a time; a thread that waited finds it done
            cached = self._cache.get(key)
            if cached is None or cached.revision != knowledge_base.revision:
                cached = self._cache.put(key, self._refreshed(knowledge_base, model, dimension, cached))
        return cached

    @staticmethod
    def _refreshed(knowledge_base: KnowledgeBase, model: str, dimension: int, old: _Matrix | None) -> _Matrix:
        chunks = Chunk.objects.filter(
            knowledge_base_id=knowledge_base.pk, embedding_model=model, embedding_dim=dimension
        ).order_by("id")
        if old is None:
            parts = [chunks]
            keep = np.zeros(0, dtype=bool)
        else:
            current = np.fromiter(chunks.values_list("id", flat=True), dtype=np.int64)
            keep = np.isin(old.ids, current)
            wanted = np.setdiff1d(current, old.ids, assume_unique=True).tolist()
            parts = [chunks.filter(id__in=wanted[start : start + 2000]) for start in range(0, len(wanted), 2000)]
        ids, vectors = [], []
        for part in parts:
            for chunk_id, embedding in part.values_list("id", "embedding").iterator(chunk_size=2000):
                if embedding is not None and len(embedding) == dimension:
                    ids.append(chunk_id)
                    vectors.append(embedding)
        added = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), dimension)
        if old is None or not keep.any():
            return _Matrix(np.asarray(ids, dtype=np.int64), added, knowledge_base.revision)
        return _Matrix(
            np.concatenate([old.ids[keep], np.asarray(ids, dtype=np.int64)]),
            np.concatenate([old.matrix[keep], added]),
            knowledge_base.revision,
        )

    def search(
        self, knowledge_base: KnowledgeBase, *, model: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        data = self._matrix(knowledge_base, model, len(vector))
        if not len(data.ids) or k <= 0:
            return []
        scores = data.matrix @ np.asarray(vector, dtype=np.float32)
        top = np.argpartition(-scores, k - 1)[:k] if len(scores) > k else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(data.ids[i]), float(scores[i])) for i in top]

    def similarities(
        self, knowledge_base: KnowledgeBase, *, model: str, vector: np.ndarray, chunk_ids: Sequence[int]
    ) -> dict[int, float]:
        data = self._matrix(knowledge_base, model, len(vector))
        rows = [(chunk_id, data.rows[chunk_id]) for chunk_id in chunk_ids if chunk_id in data.rows]
        if not rows:
            return {}
        scores = data.matrix[[row for _, row in rows]] @ np.asarray(vector, dtype=np.float32)
        return {chunk_id: float(score) for (chunk_id, _), score in zip(rows, scores, strict=True)}

    def clear(self) -> None:
        self._cache.clear()


class AsVector(Func):
    """`<expression>::vector(<dimension>)`: the typed form the partial HNSW index of that dimension is built on."""

    template = "(%(expressions)s)::vector(%(dimension)d)"

    def __init__(self, expression: Any, *, dimension: int) -> None:
        super().__init__(expression, dimension=int(dimension), output_field=FloatField())


class CosineDistance(Func):
    """pgvector's cosine distance operator `<=>` (1 - cosine similarity)."""

    arg_joiner = " <=> "
    template = "(%(expressions)s)"
    output_field = FloatField()


class PgvectorBackend(VectorBackend):
    """pgvector: an HNSW cosine index per dimension (partial: `WHERE embedding_dim = d`, on `embedding::vector(d)`),
    queried through the tenant-scoped manager, so the tenant filter is the one every other query gets."""

    name = "pgvector"

    def _distance(self, vector: np.ndarray) -> CosineDistance:
        dimension = len(vector)
        return CosineDistance(
            AsVector("embedding", dimension=dimension),
            AsVector(Value(vector_literal(vector)), dimension=dimension),
        )

    def _queryset(self, knowledge_base: KnowledgeBase, model: str, vector: np.ndarray, k: int):
        return (
            Chunk.objects.filter(knowledge_base_id=knowledge_base.pk, embedding_model=model, embedding_dim=len(vector))
            .annotate(distance=self._distance(vector))
            .order_by("distance")
            .values_list("id", "distance")[:k]
        )

    @contextmanager
    def _scan(self, k: int) -> Iterator[None]:
        alias = router.db_for_read(Chunk)
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            # SET LOCAL: only this transaction. relaxed_order lets the index scan continue until k rows pass the
            # knowledge-base and tenant filters; the rows are re-sorted afterwards, as pgvector's docs advise.
            # ef_search also enters the planner's cost of an HNSW scan, against reading the rows and sorting them.
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cursor.execute(f"SET LOCAL hnsw.ef_search = {max(HNSW_EF_SEARCH, int(k))}")
            yield

    def search(
        self, knowledge_base: KnowledgeBase, *, model: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        if k <= 0:
            return []
        queryset = self._queryset(knowledge_base, model, vector, k)
        with self._scan(k):
            rows = list(queryset)
        rows.sort(key=lambda row: row[1])
        return [(chunk_id, 1.0 - float(distance)) for chunk_id, distance in rows]

    def explain(self, knowledge_base: KnowledgeBase, *, model: str, vector: np.ndarray, k: int) -> str:
        """The plan of `search`'s query, under the settings it runs with (which index, or a sort)."""
        with self._scan(k):
            return self._queryset(knowledge_base, model, vector, k).explain()

    def similarities(
        self, knowledge_base: KnowledgeBase, *, model: str, vector: np.ndarray, chunk_ids: Sequence[int]
    ) -> dict[int, float]:
        if not chunk_ids:
            return {}
        rows = (
            Chunk.objects.filter(
                knowledge_base_id=knowledge_base.pk,
                embedding_model=model,
                embedding_dim=len(vector),
                id__in=list(chunk_ids),
            )
            .annotate(distance=self._distance(vector))
            .order_by()
            .values_list("id", "distance")
        )
        return {chunk_id: 1.0 - float(distance) for chunk_id, distance in rows}


_exact = ExactBackend()
_pgvector = PgvectorBackend()


def uses_pgvector() -> bool:
    """True when the Chunk embedding column is pgvector's `vector` (the migration found the extension)."""
    alias = router.db_for_read(Chunk)
    return column_is_vector_cached(connections[alias], Chunk._meta.db_table, "embedding")


def backend() -> VectorBackend:
    """The active vector backend."""
    return _pgvector if uses_pgvector() else _exact


def backend_name() -> str:
    """ "pgvector" or "exact": what the admin shows."""
    return backend().name


def index_name(dimension: int) -> str:
    return f"knowledge_chunk_hnsw_{int(dimension)}"


def own_index_name(dimension: int, knowledge_base_id: int) -> str:
    """The name of one knowledge base's own HNSW index for vectors of `dimension`."""
    return f"knowledge_chunk_hnsw_{int(dimension)}_kb{int(knowledge_base_id)}"


_OWN_INDEX = re.compile(r"^knowledge_chunk_hnsw_(\d+)_kb(\d+)$")

# What is known to exist: (alias, database, dimension) for the shared indexes, (..., dimension, knowledge base id)
# for a knowledge base's own; only valid indexes, once committed.
_indexed: set[tuple] = set()


def _index_key(connection: Any, *parts: int) -> tuple:
    return (connection.alias, str(connection.settings_dict.get("NAME")), *parts)


def _hnsw_sql(name: str, dimension: int, *, where: str, concurrently: bool = False) -> str:
    table = connections[router.db_for_write(Chunk)].ops.quote_name(Chunk._meta.db_table)
    return (
        f"CREATE INDEX {'CONCURRENTLY ' if concurrently else ''}IF NOT EXISTS {name} ON {table} "
        f"USING hnsw ((embedding::vector({dimension})) vector_cosine_ops) "
        f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) WHERE {where}"
    )


def ensure_index(dimension: int) -> None:
    """Create, if missing, the partial HNSW cosine index for vectors of `dimension` (no-op without pgvector).
    Ingestion calls it after writing chunks of that dimension."""
    dimension = int(dimension)
    if dimension <= 0 or not uses_pgvector():
        return
    connection = connections[router.db_for_write(Chunk)]
    key = _index_key(connection, dimension)
    if key in _indexed:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_class WHERE relname = %s AND relkind = 'i'", [index_name(dimension)])
        if cursor.fetchone() is None:
            if connection.in_atomic_block:
                # Rows written earlier in this transaction leave deferred foreign-key checks pending, and
                # PostgreSQL refuses CREATE INDEX until they have run: run them now.
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(_hnsw_sql(index_name(dimension), dimension, where=f"embedding_dim = {dimension}"))
            if connection.in_atomic_block:
                return  # not known to exist until the transaction commits
    _indexed.add(key)


def own_index_min_chunks() -> int:
    """Chunks of one dimension from which a knowledge base gets its own HNSW index (0: never)."""
    return max(0, int(setting("KNOWLEDGE_OWN_INDEX_MIN_CHUNKS")))


def _index_valid(cursor: Any, name: str) -> bool | None:
    """Whether the index `name` is valid (a failed CREATE INDEX CONCURRENTLY leaves an invalid one); None: none."""
    cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
    row = cursor.fetchone()
    return None if row is None else bool(row[0])


def needs_own_index(knowledge_base_id: int, dimension: int) -> bool:
    """True when the knowledge base holds at least KNOWLEDGE_OWN_INDEX_MIN_CHUNKS chunks of `dimension` and has no
    valid index of its own for them yet (pgvector only; runs in the knowledge base's tenant scope)."""
    dimension, knowledge_base_id = int(dimension), int(knowledge_base_id)
    minimum = own_index_min_chunks()
    if dimension <= 0 or not minimum or not uses_pgvector():
        return False
    connection = connections[router.db_for_write(Chunk)]
    key = _index_key(connection, dimension, knowledge_base_id)
    if key in _indexed:
        return False
    chunks = Chunk.objects.filter(knowledge_base_id=knowledge_base_id, embedding_dim=dimension)
    if chunks.order_by().values("pk")[:minimum].count() < minimum:  # counts no further than the threshold
        return False
    with connection.cursor() as cursor:
        if _index_valid(cursor, own_index_name(dimension, knowledge_base_id)):
            if not connection.in_atomic_block:
                _indexed.add(key)
            return False
    return True


def ensure_own_index(knowledge_base_id: int, dimension: int) -> bool:
    """Give a large knowledge base (`needs_own_index`) its own partial HNSW index, `... WHERE embedding_dim = d AND
    knowledge_base_id = id`, so that its queries walk only its own graph instead of the shared one, where other
    knowledge bases' nearer chunks make the filtered scan slow. Returns True when this call built it.

    Outside a transaction (a worker, an ingestion thread) it is built CONCURRENTLY, so ingestion and search go on
    meanwhile, under an advisory lock: one builder per index, another caller returns at once; an invalid leftover
    of a failed build is dropped and built again. Inside a transaction (tests) it is a plain CREATE INDEX, which
    holds other writes to the table until the transaction ends."""
    dimension, knowledge_base_id = int(dimension), int(knowledge_base_id)
    if not needs_own_index(knowledge_base_id, dimension):
        return False
    connection = connections[router.db_for_write(Chunk)]
    name = own_index_name(dimension, knowledge_base_id)
    where = f"embedding_dim = {dimension} AND knowledge_base_id = {knowledge_base_id}"
    if connection.in_atomic_block:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # as in ensure_index
            cursor.execute(_hnsw_sql(name, dimension, where=where))
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [name])
        if not cursor.fetchone()[0]:
            return False  # another process is building it
        try:
            if _index_valid(cursor, name) is False:
                logger.warning("dropping the invalid index %s (left by a failed build) to build it again", name)
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            started = time.monotonic()
            try:
                cursor.execute(_hnsw_sql(name, dimension, where=where, concurrently=True))
            except Exception:
                _drop_quietly(cursor, name)  # a failed concurrent build leaves an invalid index behind
                raise
            seconds = time.monotonic() - started
            logger.info("built the vector index %s of knowledge base %s in %.1f s", name, knowledge_base_id, seconds)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [name])
    _indexed.add(_index_key(connection, dimension, knowledge_base_id))
    return True


def _drop_quietly(cursor: Any, name: str) -> None:
    try:
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    except Exception:  # the next build drops it (it is invalid, so no query uses it meanwhile)
        logger.warning("could not drop the invalid index %s", name, exc_info=True)


def own_indexes() -> dict[str, tuple[int, int]]:
    """Every knowledge base's own HNSW index in the database: name -> (dimension, knowledge base id)."""
    if not uses_pgvector():
        return {}
    connection = connections[router.db_for_write(Chunk)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname LIKE %s",
            [Chunk._meta.db_table, r"knowledge\_chunk\_hnsw\_%\_kb%"],
        )
        names = [row[0] for row in cursor.fetchall()]
    found = {}
    for name in names:
        match = _OWN_INDEX.match(name)
        if match:
            found[name] = (int(match[1]), int(match[2]))
    return found


def drop_own_indexes(knowledge_base_id: int) -> list[str]:
    """Drop a knowledge base's own HNSW indexes (it was deleted); returns their names. CONCURRENTLY outside a
    transaction, so searches of other knowledge bases are not held up meanwhile."""
    knowledge_base_id = int(knowledge_base_id)
    names = [name for name, (_, kb_id) in own_indexes().items() if kb_id == knowledge_base_id]
    connection = connections[router.db_for_write(Chunk)]
    with connection.cursor() as cursor:
        for name in names:
            concurrently = "" if connection.in_atomic_block else "CONCURRENTLY "
            cursor.execute(f"DROP INDEX {concurrently}IF EXISTS {name}")
    for key in [key for key in _indexed if len(key) == 4 and key[3] == knowledge_base_id]:
        _indexed.discard(key)
    return names


def clear_caches() -> None:
    """Drop the in-process matrices and what is known about indexes (tests; memory)."""
    _exact.clear()
    _indexed.clear()
