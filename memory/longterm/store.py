"""Search collections of long-term memory, held per process and refreshed by what changed.

One collection per owner (a memory key, or a conversation for indexed turns): the rows' keyword terms as BM25
segments and their vectors as one matrix, ranked by knowledge.retrieval.rank_collection (the knowledge bases'
fusion, not a copy). A refresh reads the owner's row count and newest id: rows added since are read alone and
become a new segment; a deletion (the count does not add up) rebuilds the collection.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connections, router
from django.db.models import Count, Max, Model

from core.cache import LRUCache
from knowledge.embedders import Embedder, EmbedderError, local_embedder
from knowledge.keyword import BM25Index, index_terms, terms_for
from knowledge.retrieval import Collection, rank_collection

MAX_SEGMENTS = 6
_collections = LRUCache(256)
_locks: dict[tuple, threading.Lock] = {}
_locks_guard = threading.Lock()

_SPACE = re.compile(r"\s+")
_EDGE_PUNCTUATION = " \t\n.,;:!?。，；：！？、…\"'“”‘’()（）[]【】"


def normalise(text: str) -> str:
    """The form two texts are compared in: NFKC (full-width folded), case-folded, spaces collapsed, punctuation at
    the ends dropped."""
    text = unicodedata.normalize("NFKC", text or "").casefold()
    return _SPACE.sub(" ", text).strip(_EDGE_PUNCTUATION)


def text_hash(text: str) -> str:
    """The duplicate key of a memory or event: SHA-256 of the normalised text."""
    return hashlib.sha256(normalise(text).encode()).hexdigest()


def stored_terms(text: str) -> str:
    """The keyword terms kept with a row (the knowledge bases' tokenizer: jieba for Chinese, words otherwise)."""
    return " ".join(terms_for(text))


def embedder() -> Embedder:
    """The embedder of long-term memory: the local model (offline, no quota)."""
    return local_embedder()


def embed(texts: Sequence[str]) -> tuple[list[tuple[float, ...] | None], str]:
    """Vectors of `texts` (None each when the model fails) and the embedder's signature."""
    model = embedder()
    if not texts:
        return [], model.signature()
    try:
        vectors = model.embed(list(texts))
    except EmbedderError:
        return [None] * len(texts), ""
    return [tuple(float(v) for v in row) for row in vectors], model.signature()


def search_fields(text: str) -> dict[str, Any]:
    """The fields a new row stores to be found: terms and the embedding (with its embedder)."""
    vectors, signature = embed([text])
    return {"terms": stored_terms(text), "embedding": vectors[0], "embedder": signature if vectors[0] else ""}


@dataclass(frozen=True)
class _Held:
    count: int
    newest: int
    collection: Collection


def _owner_key(model: type[Model], filters: dict[str, Any]) -> tuple:
    alias = router.db_for_read(model)
    database = (alias, str(connections[alias].settings_dict.get("NAME")))
    return (*database, model._meta.label, *sorted(filters.items()))


def _read(model: type[Model], filters: dict[str, Any], newer_than: int = 0) -> tuple[list[int], list[str], list]:
    rows = (
        model.objects.filter(**filters, id__gt=newer_than)
        .order_by("id")
        .values_list("id", "terms", "embedding", "embedder")
        .iterator(chunk_size=2000)
    )
    ids, terms, vectors = [], [], []
    signature = embedder().signature()
    for row_id, row_terms, vector, row_embedder in rows:
        ids.append(row_id)
        terms.append(row_terms or "")
        vectors.append(vector if vector is not None and row_embedder == signature else None)
    return ids, terms, vectors


def _matrix(ids: list[int], vectors: list) -> tuple[np.ndarray, np.ndarray]:
    pairs = [(row_id, vector) for row_id, vector in zip(ids, vectors, strict=True) if vector is not None]
    dimension = embedder().dimension
    matrix = np.asarray([vector for _, vector in pairs], dtype=np.float32).reshape(len(pairs), dimension)
    return np.asarray([row_id for row_id, _ in pairs], dtype=np.int64), matrix


def collection(model: type[Model], **filters: Any) -> Collection:
    """The search collection of `model`'s rows matching `filters` (call inside the tenant scope; the filters
    name the owner: user and key, or conversation)."""
    key = _owner_key(model, filters)
    state = model.objects.filter(**filters).aggregate(count=Count("id"), newest=Max("id"))
    count, newest = state["count"], state["newest"] or 0
    held: _Held | None = _collections.get(key)
    if held is not None and held.count == count and held.newest == newest:
        return held.collection
    with _locks_guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        held = _collections.get(key)
        if held is not None and held.count == count and held.newest == newest:
            return held.collection
        if held is not None and newest > held.newest and len(held.collection.segments) < MAX_SEGMENTS:
            ids, terms, vectors = _read(model, filters, newer_than=held.newest)
            if held.count + len(ids) == count:
                vector_ids, matrix = _matrix(ids, vectors)
                old = held.collection
                grown = Collection(
                    segments=(*old.segments, BM25Index(ids, terms)),
                    vector_ids=np.concatenate([old.vector_ids, vector_ids]),
                    matrix=np.concatenate([old.matrix, matrix]),
                )
                return _collections.put(key, _Held(count, max(ids, default=held.newest), grown)).collection
        ids, terms, vectors = _read(model, filters)
        vector_ids, matrix = _matrix(ids, vectors)
        built = Collection(segments=(BM25Index(ids, terms),), vector_ids=vector_ids, matrix=matrix)
        return _collections.put(key, _Held(len(ids), max(ids, default=0), built)).collection


def rank(model: type[Model], query: str, *, top_k: int, allowed=None, **filters: Any) -> list[tuple[int, float]]:
    """The best `top_k` (row id, score) of the owner's rows for `query` (hybrid: keyword and vectors)."""
    return rank_collection(collection(model, **filters), query, embedder=embedder(), top_k=top_k, allowed=allowed)


def clear_caches() -> None:
    _collections.clear()


def normalised_terms(text: str) -> set[str]:
    """The index terms of a text (entity matching)."""
    return set(index_terms(terms_for(text)))
