"""Search collections of long-term memory, held per process and refreshed by what changed.

One collection per owner (a memory key, or a conversation for indexed turns): the rows' keyword terms as BM25
segments (knowledge.keyword's index) and their vectors as one matrix (knowledge.retrieval.Collection). A refresh
reads the owner's row count and newest id (on PostgreSQL one row of CollectionState, kept by triggers; elsewhere
counted): rows added since are read alone and become a new segment; a deletion (the count does not add up)
rebuilds the collection.

Ranking is the knowledge bases' hybrid (BM25 and cosine candidates, each standardised over its own top
CANDIDATES, summed by weight: knowledge.ranking.fuse_zscore's formula), with three differences measured on
conversations (bench/memory_recall.py, LoCoMo) where each helped:
- the rows are dialogue, full of questions, so the keyword query leaves out English question words, auxiliaries
  and pronouns ("what did you...": they match the questions in the memory rather than the answers);
- English words are folded a little further than the knowledge bases' plural stemmer (Porter's step 1: -ed, -ing,
  -ies; "researching" finds "research"), on the rows' stored terms and the query alike (in this process only: the
  stored terms are unchanged);
- the local model reads a question against dialogue worse than BM25 does: its weight is VECTOR_WEIGHT of the
  knowledge bases' (which is the query's share of Latin letters, so Chinese is still ranked by BM25 alone).
Every row gets a fused score (`Scored`), not only the candidates, so the event graph can weigh the neighbours it
reaches along relations (memory.longterm.events.events_walk).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import itertools
import logging
import re
import threading
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.db.models import Count, Max, Model, Sum

from core.cache import LRUCache
from core.conf import setting
from knowledge.embedders import Embedder, EmbedderError, local_embedder
from knowledge.keyword import STOP_WORDS, BM25Index, CollectionStats, terms_for
from knowledge.ranking import CANDIDATES, query_vector, vector_weight
from knowledge.retrieval import Collection
from memory.models import CollectionState
from tenants.scope import current_scope

logger = logging.getLogger(__name__)

MAX_SEGMENTS = 6
# The vector retriever's weight against BM25's 1 (times the knowledge bases' weight by language). Issue 14 (both dev
# conversations); split (issue 30): each half keeps 0.6 against 0.4, 0.8 and 1.0.
VECTOR_WEIGHT = 0.6
_collections = LRUCache(256)
_statements = LRUCache(1024)  # compiled SQL of the reads every recall repeats (see `repeated`)
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


class MemoryEmbedder(enum.StrEnum):
    """MEMORY_EMBEDDER: which local model (offline, no quota) embeds long-term memory."""

    AUTO = "auto"  # each text by the model that reads its language: English MiniLM for Latin script, else e5
    LOCAL = "local"  # English all-MiniLM-L6-v2 for everything
    LOCAL_MULTILINGUAL = "local_multilingual"  # multilingual-e5-small for everything


# AUTO sends a text to the English model when at least this share of its letters is Latin script.
LATIN_SHARE = 0.9
_LATIN_LETTER = re.compile(r"[A-Za-z\u00C0-\u024F]")
_LETTER = re.compile(r"[^\W\d_]")


def _choice() -> MemoryEmbedder:
    value = setting("MEMORY_EMBEDDER")
    try:
        return MemoryEmbedder(value)
    except ValueError:
        choices = ", ".join(choice.value for choice in MemoryEmbedder)
        raise ImproperlyConfigured(
            f"MEMORY_EMBEDDER 的值 {value!r} 无效，可选：{choices} / MEMORY_EMBEDDER={value!r} is not one of {choices}."
        ) from None


def embedders() -> tuple[Embedder, ...]:
    """The models whose vectors count, in the order of a collection's groups (`Collection.group_ends`)."""
    choice = _choice()
    if choice is MemoryEmbedder.AUTO:
        return (local_embedder(MemoryEmbedder.LOCAL), local_embedder(MemoryEmbedder.LOCAL_MULTILINGUAL))
    return (local_embedder(choice),)


def reads_as_latin(text: str) -> bool:
    """Whether at least LATIN_SHARE of the letters of `text` are Latin script (no letters: yes)."""
    letters = len(_LETTER.findall(text))
    return not letters or len(_LATIN_LETTER.findall(text)) >= LATIN_SHARE * letters


def embedder_for(text: str) -> Embedder:
    """The model that embeds `text` (MEMORY_EMBEDDER; with "auto", the English model for Latin script, the
    multilingual one for the rest: e5 reads Chinese, MiniLM ranks English conversations better, docs/memory.md)."""
    models = embedders()
    return models[0] if len(models) == 1 or reads_as_latin(text) else models[1]


def embed(texts: Sequence[str]) -> tuple[list[tuple[float, ...] | None], list[str]]:
    """Vectors of `texts` and each one's embedder signature (None and "" where the model fails)."""
    vectors: list[tuple[float, ...] | None] = [None] * len(texts)
    signatures = [""] * len(texts)
    by_model: dict[str, tuple[Embedder, list[int]]] = {}
    for number, text in enumerate(texts):
        model = embedder_for(text)
        by_model.setdefault(model.signature(), (model, []))[1].append(number)
    for signature, (model, numbers) in by_model.items():
        try:
            rows = model.embed([texts[number] for number in numbers])
        except EmbedderError:
            continue
        for number, row in zip(numbers, rows, strict=True):
            vectors[number], signatures[number] = tuple(float(v) for v in row), signature
    return vectors, signatures


def search_fields(text: str) -> dict[str, Any]:
    """The fields a new row stores to be found: terms and the embedding (with its embedder)."""
    vectors, signatures = embed([text])
    return {"terms": stored_terms(text), "embedding": vectors[0], "embedder": signatures[0]}


@dataclass(frozen=True)
class _Held:
    count: int
    newest: int
    collection: Collection


def scope_key(model: type[Model]) -> tuple:
    """What a per-process structure of `model`'s rows is kept by besides their owner: the database and the tenant
    scope the rows are read in (rows of one tenant are never served to another)."""
    alias = router.db_for_read(model)
    scope = current_scope()
    tenant = None if scope is None else "*" if scope.is_bypass else scope.tenant.pk
    return (alias, str(connections[alias].settings_dict.get("NAME")), tenant, model._meta.label)


def _owner_key(model: type[Model], filters: dict[str, Any]) -> tuple:
    return (*scope_key(model), setting("MEMORY_EMBEDDER"), *sorted(filters.items()))


def repeated(model: type[Model], key: tuple, run: Callable[[], Any], variable: Sequence[Any] = ()) -> list[tuple]:
    """The rows of the ORM read `run` (a callable that evaluates it), compiled once per `key` (which must hold
    `scope_key(model)` and whatever else fixes the statement's shape): later calls send the same SQL, the params
    ending in `variable` replaced by theirs. Building and compiling a queryset costs more than PostgreSQL takes to
    answer these reads (1-2 ms each, several per recall, more on a busy machine). The statement goes through the
    connection's execute wrappers like any (row-level security's tenant setting included)."""
    alias = key[0]
    statement = _statements.get(key)
    if statement is not None:
        sql, fixed = statement
        with connections[alias].cursor() as cursor:
            cursor.execute(sql, [*fixed, *variable])
            return cursor.fetchall()
    seen: list[tuple[str, Any]] = []

    def capture(execute, sql, params, many, context):
        seen.append((sql, params))
        return execute(sql, params, many, context)

    with connections[alias].execute_wrapper(capture):
        rows = run()
    if len(seen) == 1 and seen[0][1] is not None:
        sql, params = seen[0][0], list(seen[0][1])
        count = len(variable)
        if not count or params[-count:] == list(variable):  # kept only when the params end as said
            _statements.put(key, (sql, params[: len(params) - count]))
    return rows


@dataclass(frozen=True)
class _Rows:
    """Rows read for a collection: ids ascending, folded terms, (group, vector) pairs (None: no vector of a model
    that counts) and the ids of the rows the model marks (`collection_marked`)."""

    ids: list[int]
    terms: list[str]
    vectors: list
    marked: list[int]


def _read(model: type[Model], filters: dict[str, Any], newer_than: int = 0) -> _Rows:
    """The owner's rows newer than `newer_than` (one statement)."""
    marking: tuple[str, str] | None = getattr(model, "collection_marked", None)
    fields = ("id", "terms", "embedding", "embedder", *(marking[:1] if marking else ()))
    rows = model.objects.filter(**filters, id__gt=newer_than).order_by("id").values_list(*fields)
    read = _Rows([], [], [], [])
    groups = {embedder.signature(): group for group, embedder in enumerate(embedders())}
    for row_id, row_terms, vector, row_embedder, *mark in rows.iterator(chunk_size=2000):
        read.ids.append(row_id)
        read.terms.append(fold_terms(row_terms or ""))
        group = groups.get(row_embedder)
        read.vectors.append(None if vector is None or group is None else (group, vector))
        if marking and mark[0] == marking[1]:
            read.marked.append(row_id)
    return read


def _marked(ids: Sequence[int]) -> np.ndarray:
    return np.asarray(ids, dtype=np.int64)


def _matrix(ids: Sequence[int], vectors: Sequence) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """The vector ids and matrix grouped by embedder (each group's rows in the order given), with the groups'
    ends. `vectors`: (group, vector) pairs or None, as `_read` gives them."""
    held = [(item[0], row_id, item[1]) for row_id, item in zip(ids, vectors, strict=True) if item is not None]
    pairs = sorted(held, key=lambda triple: triple[0])  # stable: each group keeps the rows' order
    dimension = embedders()[0].dimension
    matrix = np.asarray([vector for _, _, vector in pairs], dtype=np.float32).reshape(len(pairs), dimension)
    counts = np.bincount(np.asarray([group for group, _, _ in pairs], dtype=np.int64), minlength=len(embedders()))
    return (
        np.asarray([row_id for _, row_id, _ in pairs], dtype=np.int64),
        matrix,
        tuple(int(end) for end in np.cumsum(counts)),
    )


def _grouped(held: Collection) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(group, vector ids, matrix) per embedder group of `held`."""
    ends = held.group_ends or (len(held.vector_ids),)
    out, start = [], 0
    for group, end in enumerate(ends):
        out.append((group, held.vector_ids[start:end], held.matrix[start:end]))
        start = end
    return out


def _merged(old: Collection, rows: _Rows) -> Collection:
    """`old` with the newer `rows` as one more keyword segment, their vectors still grouped by embedder."""
    parts = _grouped(old)
    new_ids, new_matrix, new_ends = _matrix(rows.ids, rows.vectors)
    vector_ids, matrices, ends, start = [], [], [], 0
    for (_group, old_ids, old_matrix), end in zip(parts, new_ends, strict=True):
        vector_ids += [old_ids, new_ids[start:end]]
        matrices += [old_matrix, new_matrix[start:end]]
        ends.append((ends[-1] if ends else 0) + len(old_ids) + end - start)
        start = end
    return Collection(
        segments=(*old.segments, BM25Index(rows.ids, rows.terms)),
        vector_ids=np.concatenate(vector_ids),
        matrix=np.concatenate(matrices),
        group_ends=tuple(ends),
        marked=np.concatenate([old.marked, _marked(rows.marked)]),  # the new rows' ids are all above the old ones
    )


def collection(model: type[Model], **filters: Any) -> Collection:
    """The search collection of `model`'s rows matching `filters` (call inside the tenant scope; the filters
    name the owner: user and key, or conversation)."""
    key = _owner_key(model, filters)

    def state() -> list[tuple]:
        if _kept_by_triggers(model, filters, key[0]):
            kept = CollectionState.objects.filter(label=model._meta.label_lower, **filters)
            found = kept.aggregate(count=Sum("row_count"), newest=Max("newest_id"))
        else:
            found = model.objects.filter(**filters).aggregate(count=Count("id"), newest=Max("id"))
        return [(found["count"], found["newest"])]

    ((count, newest),) = repeated(model, (*key, "state"), state)
    count, newest = count or 0, newest or 0  # an owner without a state row: SUM and MAX of nothing are NULL
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
            newer = _read(model, filters, newer_than=held.newest)
            if held.count + len(newer.ids) == count:
                grown = _merged(held.collection, newer)
                return _collections.put(key, _Held(count, max(newer.ids, default=held.newest), grown)).collection
        rows = _read(model, filters)
        vector_ids, matrix, ends = _matrix(rows.ids, rows.vectors)
        segment = BM25Index(rows.ids, rows.terms)
        built = Collection((segment,), vector_ids, matrix, group_ends=ends, marked=_marked(rows.marked))
        return _collections.put(key, _Held(len(rows.ids), max(rows.ids, default=0), built)).collection


def _kept_by_triggers(model: type[Model], filters: dict[str, Any], alias: str) -> bool:
    """Whether the owner's count and newest id can be read from CollectionState: on PostgreSQL (where migration
    memory 0019 keeps it), for a model that declares its owner columns, filtered by those (all or some: a user's
    events of every key add up) and nothing else."""
    owner = getattr(model, "collection_owner", None)
    return owner is not None and connections[alias].vendor == "postgresql" and set(filters) <= {"tenant_id", *owner}


def rank(model: type[Model], query: str, *, top_k: int, allowed=None, **filters: Any) -> list[tuple[int, float]]:
    """The best `top_k` (row id, score) of the owner's rows for `query` (hybrid: keyword and vectors).
    `allowed(ids) -> bool mask` keeps only some rows."""
    return scored(model, query, allowed=allowed, **filters).top(top_k)


# --- the query and the terms ----------------------------------------------------------------------------------------

# Left out of the keyword query (English; the Chinese ones are knowledge.keyword's stop words already).
_QUESTION_WORDS = (
    "what when where who whom whose which why how did does do doing done has have had was were is are am be been "
    "being would could should can will might may shall you your yours i me my mine he she her hers his him they "
    "them their we us our it its"
)
QUESTION_WORDS = frozenset(_QUESTION_WORDS.split())
_QUERY_WORD = re.compile(r"[0-9a-z]+(?:['’][a-z]+)?", re.IGNORECASE)
_WORD_CHARACTER = re.compile(r"\w")


def keyword_query(query: str) -> str:
    """What the keyword retriever reads of a query: English question words left out (unless nothing else is
    left), the other English words folded as the rows' terms are; other scripts as they are."""
    text = unicodedata.normalize("NFKC", query)

    def kept(match: re.Match) -> str:
        word = match.group(0).lower()
        return " " if word in QUESTION_WORDS else fold(word)

    cleaned = _QUERY_WORD.sub(kept, text)
    return cleaned if _WORD_CHARACTER.search(cleaned) else _QUERY_WORD.sub(lambda m: fold(m.group(0).lower()), text)


def fold_terms(terms: str) -> str:
    """Stored keyword terms with English words folded (`fold`)."""
    return " ".join(fold(term) for term in terms.split())


def _measure(stem: str) -> int:
    """Porter's m: how many vowel-consonant sequences `stem` has (y after a consonant is a vowel)."""
    kinds = []
    for number, letter in enumerate(stem):
        vowel = letter in "aeiou" or (letter == "y" and number > 0 and stem[number - 1] not in "aeiou")
        if not kinds or kinds[-1] != vowel:
            kinds.append(vowel)
    return sum(1 for first, second in itertools.pairwise(kinds) if first and not second)


def _has_vowel(stem: str) -> bool:
    return any(
        letter in "aeiou" or (letter == "y" and number > 0 and stem[number - 1] not in "aeiou")
        for number, letter in enumerate(stem)
    )


_CVC_END = re.compile(r"[^aeiou][aeiouy][^aeiouwxy]$")


@functools.lru_cache(maxsize=65536)
def fold(word: str) -> str:
    """Porter's step 1 (plurals, -ed, -ing, a final y after a vowel-bearing stem) on a lower-case English word;
    stop words and other words unchanged."""
    if len(word) < 4 or word in STOP_WORDS or not word.isascii() or not word.isalpha():
        return word
    if word.endswith(("sses", "ies")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    if word.endswith("eed"):
        return word[:-1] if _measure(word[:-3]) > 0 else word
    for suffix in ("ed", "ing"):
        stem = word[: -len(suffix)]
        if word.endswith(suffix) and _has_vowel(stem):
            word = stem
            if word.endswith(("at", "bl", "iz")):
                word += "e"
            elif len(word) > 1 and word[-1] == word[-2] and word[-1] not in "aeioulsz":
                word = word[:-1]
            elif _measure(word) == 1 and _CVC_END.search(word):
                word += "e"
            break
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    return word


# --- scoring --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """The fused relevance of every row of a collection for one query. `candidate` marks the rows a retriever
    put in its top CANDIDATES (the rows `top` may return, as the knowledge bases' hybrid returns only those)."""

    ids: np.ndarray  # ascending
    scores: np.ndarray
    candidate: np.ndarray
    marked: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # the collection's, ascending

    def lowered(self, amount: float) -> Scored:
        """The same scores with the marked rows' lowered by `amount` (in the fused scores' units)."""
        if not amount or not len(self.marked) or not len(self.ids):
            return self
        hit = np.isin(self.ids, self.marked, assume_unique=True)
        return replace(self, scores=self.scores - amount * hit)

    def top(self, k: int) -> list[tuple[int, float]]:
        """The best `k` candidates (id, score), best first."""
        rows = np.flatnonzero(self.candidate)
        if k <= 0 or not len(rows):
            return []
        if len(rows) > k:
            rows = rows[np.argpartition(-self.scores[rows], k - 1)[:k]]
        rows = rows[np.lexsort((self.ids[rows], -self.scores[rows]))]
        return [(int(self.ids[row]), float(self.scores[row])) for row in rows]

    def of(self, ids: Sequence[int] | np.ndarray) -> list[float]:
        """The scores of `ids` (rows the collection does not hold score the lowest of all)."""
        if not len(self.ids):
            return [0.0] * len(ids)
        wanted = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids), dtype=np.int64)
        rows = np.clip(np.searchsorted(self.ids, wanted), 0, len(self.ids) - 1)
        return np.where(self.ids[rows] == wanted, self.scores[rows], self.scores.min()).astype(np.float64).tolist()


def _standardised(scores: np.ndarray, eligible: np.ndarray, *, pad: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(z-scores of all rows against the top CANDIDATES eligible rows, the mask of those top rows). When there are
    fewer, the sample is padded with `pad` (BM25: 0, what the rest of the collection scores; None: the lowest of
    them, as fuse_zscore pads the vector list)."""
    rows = np.flatnonzero(eligible)
    if len(rows) > CANDIDATES:
        rows = rows[np.argpartition(-scores[rows], CANDIDATES - 1)[:CANDIDATES]]
    top = np.zeros(len(scores), dtype=bool)
    top[rows] = True
    sample = scores[rows].astype(np.float64)
    if len(sample) < CANDIDATES and (pad is not None or len(sample)):
        filler = pad if pad is not None else float(sample.min())
        sample = np.concatenate([sample, np.full(CANDIDATES - len(sample), filler)])
    spread = float(sample.std()) if len(sample) else 0.0
    if spread <= 1e-9:
        return np.zeros(len(scores)), top
    return (scores - float(sample.mean())) / spread, top


# Rows per matrix-vector product. One product over the whole matrix lets OpenBLAS split it over its threads, which
# on a busy machine wait for each other (10,000 x 384 at load 7: 21 ms against 1.1 ms in blocks of this size). A
# multiple of 8 rows (OpenBLAS's row groups): each score is the one-call product's or differs in its last float32 bit
# (where that product split its rows otherwise); the bench's 10,000 events and LoCoMo's collections score the same.
COSINE_BLOCK = 1024


def _cosines(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """matrix @ vector, block by block (COSINE_BLOCK)."""
    out = np.empty(len(matrix), dtype=np.float32)
    for start in range(0, len(matrix), COSINE_BLOCK):
        np.matmul(matrix[start : start + COSINE_BLOCK], vector, out=out[start : start + COSINE_BLOCK])
    return out


def score_collection(
    held: Collection, query: str, *, allowed: Callable[[np.ndarray], np.ndarray] | None = None
) -> Scored:
    """Every row of `held` scored for `query` (see the module's docstring)."""
    ids = np.concatenate([segment.ids for segment in held.segments]) if held.segments else np.zeros(0, np.int64)
    query = (query or "").strip()
    if not query or not len(ids):
        return Scored(ids, np.zeros(len(ids)), np.zeros(len(ids), dtype=bool), held.marked)
    order = None if bool(np.all(ids[1:] > ids[:-1])) else np.argsort(ids, kind="stable")  # segments are in id order
    ids = ids if order is None else ids[order]
    words = keyword_query(query)
    stats = CollectionStats.of(held.segments, words)
    keyword = np.concatenate([segment.scores(words, stats) for segment in held.segments]).astype(np.float64)
    keyword = keyword if order is None else keyword[order]
    mask = np.ones(len(ids), dtype=bool) if allowed is None else np.asarray(allowed(ids), dtype=bool)
    keyword_z, keyword_top = _standardised(keyword, mask & (keyword > 0), pad=0.0)
    fused, candidate = keyword_z, keyword_top
    similarity = np.zeros(len(ids))
    vector_part, compared, lowest = np.zeros(len(ids)), np.zeros(len(ids), dtype=bool), []
    models = embedders()
    for group, vector_ids, matrix in _grouped(held):
        weight = VECTOR_WEIGHT * vector_weight(models[group], query) if group < len(models) else 0.0
        vector = _query_vector(models[group], query) if weight > 0 and len(vector_ids) else None
        if vector is None:
            continue
        rows = np.searchsorted(ids, vector_ids)
        member = np.zeros(len(ids), dtype=bool)
        member[rows] = True
        similarity[rows] = _cosines(matrix, np.asarray(vector, dtype=np.float32))
        vector_z, vector_top = _standardised(similarity, mask & member, pad=None)  # each model on its own scale
        vector_part[member] = weight * vector_z[member]
        compared |= member
        candidate = candidate | vector_top
        if vector_top.any():
            lowest.append(weight * float(vector_z[vector_top].min()))
    if lowest:  # rows the query was not compared with score the lowest of the vector candidates
        vector_part[~compared] = min(lowest)
        fused = fused + vector_part
    if not fused.any():  # every retriever flat: the keyword order, then the vector order
        fused = keyword + 1e-3 * similarity
    return Scored(ids, fused, candidate & mask, held.marked)


def _query_vector(model: Embedder, query: str) -> np.ndarray | None:
    try:
        return query_vector(model, query)
    except EmbedderError:
        logger.warning("query embedding failed, keyword ranking only", exc_info=True)
        return None


def scored(model: type[Model], query: str, *, allowed=None, **filters: Any) -> Scored:
    """The owner's rows scored for `query` (call inside the tenant scope; `filters` name the owner)."""
    return score_collection(collection(model, **filters), query, allowed=allowed)


def clear_caches() -> None:
    _collections.clear()
    _statements.clear()
