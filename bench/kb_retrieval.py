"""Knowledge-base retrieval: quality (keyword, vector, hybrid), ingestion speed and query latency.

    .venv/bin/python bench/kb_retrieval.py --database sqlite                 # exact in-process vector search
    scripts/pgvector-server start
    .venv/bin/python bench/kb_retrieval.py --database pgvector --scale 100000   # pgvector HNSW, + 100k chunks
    .venv/bin/python bench/kb_retrieval.py --database pgvector --scale 100000 --own-index   # shared vs own index
    .venv/bin/python bench/kb_retrieval.py --sets ""                           # ingestion speed only

Data (read in place, never copied): ../shared/data/kb/en_dbpedia (BEIR DBPedia-Entity subset: 5,000 entities,
50 test queries, graded qrels) and ../shared/data/kb/zh_cmrc2018 (CMRC 2018: 1,104 passages, dev questions;
the trial split is the tuning split). Each corpus entry ("title" + text) becomes one document, ingested by the
real pipeline (knowledge.ingest.document_ingest: parse, chunk to 200 tokens, embed, write, index). Rankings are
per document (a document ranks where its best chunk does); nDCG@10 (linear gain, as trec_eval and BEIR),
recall@10 and MRR@10 (first relevant document).

Embeddings of the corpora are kept in an on-disk cache (--cache, outside the repository), so a second run does
not spend ten minutes embedding; ingestion speed is measured separately, with the real embedder and no cache,
on a document cut into ~200-token chunks. --scale N adds a knowledge base of N chunks made from the en_dbpedia
chunks: each vector replicated with Gaussian noise (cosine ~0.9 to its source) and re-normalised, the terms and
text copied, so the index sees a realistic, clustered distribution; queries are the en_dbpedia queries. Several
sizes (--scale 5000,10000) make several knowledge bases; --own-index gives each its own HNSW index and times the
queries in turns with the shared index alone and with their own (--scale-rounds).
Goals (issue 6): hybrid >= the better single method on both sets; en_dbpedia nDCG@10 >= 0.50; cmrc2018 nDCG@10
>= 0.97; ingestion >= 60 chunks/s of ~200 tokens on 2 cores; query p95 < 50 ms with 100,000 chunks on pgvector.

Needs: `make install`; the data sets above in ../shared/data/kb (BENCH_DATA_DIR elsewhere); --database pgvector:
scripts/pgvector-server running (a URL: a PostgreSQL role that can create databases; the bench database is dropped
and made again); --ingest-workers: REDIS_URL. The local models come with the installed packages. Each missing one
stops the bench at once with what to do.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    DATA_DIR,
    Missing,
    bench_parser,
    ensure_postgres,
    require_data,
    require_redis,
    setup_django,
    smoke_check,
    sqlite_url,
)

KB_DIR = DATA_DIR / "kb"
PGVECTOR_URL = "postgres://postgres@127.0.0.1:5433/kb_bench"
SETS = {
    "en_dbpedia": {"qrels": "test", "goal": 0.50},
    "zh_cmrc2018": {"qrels": "dev", "goal": 0.97},
}


# --- data --------------------------------------------------------------------------------------------------------


def load_set(name: str, split: str) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """(documents: id -> text, queries: id -> text, qrels: query id -> {document id: grade}) of a split."""
    folder = KB_DIR / name
    documents = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            title = row.get("title") or ""
            documents[row["_id"]] = f"{title}\n{row['text']}" if title else row["text"]
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with open(folder / "qrels" / f"{split}.tsv", encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            query_id, doc_id, grade = line.rstrip("\n").split("\t")
            qrels[query_id][doc_id] = int(grade)
    queries = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row["_id"] in qrels:
                queries[row["_id"]] = row["text"]
    return documents, queries, dict(qrels)


def smoke_sample(
    documents: dict[str, str], queries: dict[str, str], qrels: dict[str, dict[str, int]], *, keep: int, size: int
) -> tuple[dict[str, str], dict[str, str]]:
    """A set cut down for --smoke: its first `keep` queries, and their relevant documents with the first others of
    the corpus, `size` documents in all (more when the relevant ones are more)."""
    queries = dict(list(queries.items())[:keep])
    relevant = [doc for query in queries for doc, grade in qrels[query].items() if grade > 0 and doc in documents]
    ids = list(dict.fromkeys([*relevant, *documents]))[: max(size, len(set(relevant)))]
    return {doc: documents[doc] for doc in ids}, queries


# --- metrics -----------------------------------------------------------------------------------------------------


def ndcg_at(ranked: list[str], grades: dict[str, int], k: int = 10) -> float:
    dcg = sum(grades.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], grades: dict[str, int], k: int = 10) -> float:
    relevant = {doc for doc, g in grades.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at(ranked: list[str], grades: dict[str, int], k: int = 10) -> float:
    for i, doc in enumerate(ranked[:k]):
        if grades.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


# --- the embedding cache -----------------------------------------------------------------------------------------


class CachedEmbedder:
    """The local model with an on-disk cache of vectors by text (for the corpora only, never for timing)."""

    def __init__(self, inner, path: Path) -> None:
        self.inner = inner
        self.kind, self.model, self.dimension, self.english_only = (
            inner.kind,
            inner.model,
            inner.dimension,
            inner.english_only,
        )
        # The built model file's name carries its build key: vectors of an earlier build of the same model (another
        # graph, another onnxruntime) must not be served again under the model's unchanged name.
        built = getattr(inner, "_model_file", None)
        self.version = built().name if callable(built) else ""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path))
        self.db.execute("CREATE TABLE IF NOT EXISTS v (k TEXT PRIMARY KEY, v BLOB)")
        self.computed = 0

    def signature(self) -> str:
        return self.inner.signature()

    def _key(self, text: str, query: bool) -> str:
        role = "query\0" if query and not self.english_only else ""  # e5 embeds queries with their own prefix
        return hashlib.sha1(f"{self.model}\0{self.version}\0{role}{text}".encode(), usedforsecurity=False).hexdigest()

    def embed(self, texts: list[str], *, query: bool = False) -> np.ndarray:
        keys = [self._key(t, query) for t in texts]
        found = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            marks = ",".join("?" * len(part))
            found.update(self.db.execute(f"SELECT k, v FROM v WHERE k IN ({marks})", part).fetchall())  # noqa: S608 (placeholders only)
        missing = [i for i, k in enumerate(keys) if k not in found]
        if missing:
            vectors = self.inner.embed([texts[i] for i in missing], query=query)
            self.db.executemany(
                "INSERT OR REPLACE INTO v VALUES (?, ?)",
                [(keys[i], vectors[j].astype(np.float32).tobytes()) for j, i in enumerate(missing)],
            )
            self.db.commit()
            self.computed += len(missing)
            for j, i in enumerate(missing):
                found[keys[i]] = vectors[j].astype(np.float32).tobytes()
        return np.stack([np.frombuffer(found[k], dtype=np.float32) for k in keys])


# --- set-up --------------------------------------------------------------------------------------------------------


def check_needs(args: argparse.Namespace) -> None:
    """Stop before any work when the run's data sets or services are missing."""
    sets = set(filter(None, args.sets.split(",")))
    if args.ingest_chunks or args.ingest_small or args.ingest_workers or args.scale:
        sets.add("en_dbpedia")  # the ingestion document, the small documents and the scale test are made from it
    require_data(*(KB_DIR / name / "corpus.jsonl" for name in sorted(sets)))
    if args.ingest_workers:
        if not os.environ.get("REDIS_URL"):
            raise Missing(
                "--ingest-workers queues the documents on Celery workers: set REDIS_URL (a Redis db of yours)."
            )
        require_redis(os.environ["REDIS_URL"])


def prepare_database(kind: str) -> str:
    if kind == "sqlite":
        url = sqlite_url("kb-bench-")
    else:
        url = PGVECTOR_URL if kind == "pgvector" else kind
        ensure_postgres(url, fresh=True)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("MEDIA_ROOT", tempfile.mkdtemp(prefix="kb-bench-media-"))
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"
    return url


def make_document(knowledge_base, name: str, text: str):
    from django.core.files.base import ContentFile

    from knowledge.models import Document

    data = text.encode("utf-8")
    document = Document(knowledge_base=knowledge_base, name=name, file_type="txt", size=len(data))
    document.file.save(f"{hashlib.sha256(name.encode()).hexdigest()[:16]}.txt", ContentFile(data), save=False)
    document.save()
    return document


def ingest_corpus(tenant, name: str, documents: dict[str, str], embedder: str, *, strict: bool = False):
    """The documents ingested into a new knowledge base; with `strict` (--smoke), a document that fails ends the run."""
    from knowledge.ingest import ingest_in_scope
    from knowledge.models import Document, KnowledgeBase

    knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=f"{name} {embedder}", embedder=embedder)
    started = time.perf_counter()
    ids = [make_document(knowledge_base, doc_id, text).pk for doc_id, text in documents.items()]
    outcomes = defaultdict(int)
    for document_id in ids:
        outcomes[ingest_in_scope(document_id=document_id)] += 1
    knowledge_base.refresh_from_db()
    chunks = knowledge_base.chunks.count()
    failed = list(
        Document.objects.filter(knowledge_base=knowledge_base, status="failed").values_list("name", "error")[:3]
    )
    print(
        f"  {name} ({embedder}): {len(ids)} documents -> {chunks} chunks in {time.perf_counter() - started:.1f} s "
        f"(cached embeddings) {dict(outcomes)}{' failed e.g. ' + repr(failed) if failed else ''}"
    )
    if strict:
        smoke_check([f"{name} ({embedder}): documents failed, e.g. {failed!r}" if failed else ""])
    return knowledge_base


# --- measurements ------------------------------------------------------------------------------------------------


def measure_ingestion(
    tenant,
    texts: list[str],
    *,
    chunks_wanted: int,
    chunk_size: int,
    small_documents: int,
    embedder_kind: str,
    workers: list[int] = (),
    rounds_of: int = 3,
) -> None:
    """Chunks per second through the real ingestion (no cache) against the embedder alone on the same chunk texts,
    for two shapes: one large document cut into ~200-token chunks (the chunker ends chunks at sentence ends below
    `chunk_size`, so a chunk_size of 230 gives ~200-token chunks), and `small_documents` short documents (the
    en_dbpedia entries, about one chunk each) queued together and ingested by the task the embedded default's
    threads call (knowledge.tasks.ingest_document, one call per document, in upload order)."""
    from knowledge.embedders import embedder_for
    from knowledge.keyword import terms_for
    from knowledge.models import KnowledgeBase

    kind = embedder_kind or KnowledgeBase._meta.get_field("embedder").default
    warm = KnowledgeBase(tenant=tenant, name="warm", embedder=kind)
    embedder = embedder_for(warm)
    embedder.embed(["warm up the session", "and the threads"])  # a worker loads the model once, not per document
    terms_for("预热 jieba")
    print(f"ingestion (real pipeline, {embedder.model}, {os.cpu_count()} CPUs):")
    if chunks_wanted:
        body, tokens = [], 0
        from llm.tokens import count_text

        for text in texts:
            body.append(text.replace("\n", " "))
            tokens += count_text(text)
            if tokens > chunks_wanted * (chunk_size - 55):  # sentence ends and the 30-token overlap
                break
        knowledge_base = KnowledgeBase.objects.create(
            tenant=tenant, name="ingestion speed", chunk_size=chunk_size, embedder=kind
        )
        rounds = [[make_document(knowledge_base, f"speed-{n}.txt", "\n".join(body)).pk] for n in range(rounds_of)]
        _time_ingestion("one large document", knowledge_base, rounds, embedder)
    if small_documents:
        knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name="many small documents", embedder=kind)
        ids = [
            make_document(knowledge_base, f"small-{i}.txt", text).pk for i, text in enumerate(texts[:small_documents])
        ]
        size = -(-len(ids) // rounds_of)
        rounds = [ids[start : start + size] for start in range(0, len(ids), size)]
        _time_ingestion(f"{len(ids):,} small documents", knowledge_base, rounds, embedder)
    if workers:
        _time_on_workers(tenant, texts[: small_documents or 2000], workers, kind)


def _time_on_workers(tenant, texts: list[str], counts: list[int], kind: str) -> None:
    """The small documents queued one task each on the broker (REDIS_URL) and ingested by 1, 2, ... Celery workers
    (solo pool, KNOWLEDGE_EMBED_THREADS=1 each): chunks/s, and each count against one worker."""
    import subprocess

    import redis
    from celery import current_app
    from django.conf import settings

    from knowledge.models import Document, KnowledgeBase
    from knowledge.tasks import ingest_document

    if not str(settings.CELERY_BROKER_URL).startswith("redis"):
        print("  workers: set REDIS_URL (a Redis database of your own) to measure Celery workers")
        return
    env = {**os.environ, "KNOWLEDGE_EMBED_THREADS": "1", "CELERY_TASK_ALWAYS_EAGER": "0", "DJANGO_DEBUG": "1",
           "CELERY_BROKER_URL": settings.CELERY_BROKER_URL}  # fmt: skip
    logs = Path(tempfile.mkdtemp(prefix="kb-bench-workers-"))
    current_app.conf.task_always_eager = False

    def ingest(name: str, documents: list[str]) -> tuple[float, int]:
        knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=name, embedder=kind)
        ids = [make_document(knowledge_base, f"{name}-{i}.txt", text).pk for i, text in enumerate(documents)]
        started = time.perf_counter()
        for document_id in ids:
            ingest_document.delay(tenant.pk, document_id)
        waiting = Document.objects.filter(knowledge_base=knowledge_base, status__in=["pending", "processing"])
        while waiting.exists():
            time.sleep(0.2)
        return time.perf_counter() - started, knowledge_base.chunks.count()

    rates = {}
    for count in counts:
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        client.delete("celery", "unacked", "unacked_index", "unacked_mutex")
        client.close()
        processes = []
        for n in range(count):
            command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo", "--loglevel=INFO",
                       "--without-gossip", "--without-mingle", "--without-heartbeat",
                       "-n", f"kb-bench-{count}-{n}@%h"]  # fmt: skip
            with (logs / f"{count}-{n}.log").open("w") as out:
                root = Path(__file__).resolve().parent.parent
                worker = subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603 (our own command line)
                processes.append(worker)
        try:
            deadline = time.monotonic() + 120
            while (
                sum("ready." in (logs / f"{count}-{n}.log").read_text(errors="replace") for n in range(count)) < count
            ):
                if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                    raise RuntimeError(f"the Celery workers did not start: see {logs}")
                time.sleep(0.3)
            ingest(f"warm-up {count}", texts[: 4 * count])  # each worker loads the model once
            elapsed, chunks = ingest(f"{count} workers", texts)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
        rates[count] = chunks / elapsed
        print(
            f"  {len(texts):,} small documents on {count} Celery worker(s): {chunks} chunks in {elapsed:.1f} s = "
            f"{rates[count]:.1f} chunks/s ({rates[count] / rates[counts[0]]:.2f}x {counts[0]} worker(s); logs {logs})"
        )
    current_app.conf.task_always_eager = True


def _time_ingestion(shape: str, knowledge_base, rounds: list[list[int]], embedder) -> None:
    """Ingest the documents as the embedded default does once they are queued (its background line, in upload
    order: knowledge.services, which calls knowledge.tasks.ingest_queued), then embed the stored chunk texts alone
    with the same embedder, round after round (so that a change in the machine's load falls on both sides alike);
    print both rates over all rounds and their ratio (goal: end to end >= 0.9x embedding alone)."""
    from django.db.models import Count

    from knowledge import services
    from knowledge.models import Chunk, Document

    line = services._ingest_line
    elapsed = embedding = 0.0
    texts_only: list[str] = []
    tokens: list[int] = []
    for ids in rounds:
        started = time.perf_counter()
        for document_id in ids:
            services._ingest_in_background(knowledge_base.tenant_id, document_id)
        while True:
            with line.lock:
                if knowledge_base.tenant_id not in line.waiting:
                    break
            time.sleep(0.01)
        elapsed += time.perf_counter() - started
        chunks = list(Chunk.objects.filter(document_id__in=ids).values_list("text", "token_count"))
        started = time.perf_counter()
        embedder.embed([text for text, _ in chunks])
        embedding += time.perf_counter() - started
        texts_only += [text for text, _ in chunks]
        tokens += [count for _, count in chunks]
    documents = sum(len(ids) for ids in rounds)
    outcomes = dict(
        Document.objects.filter(knowledge_base=knowledge_base).values_list("status").annotate(n=Count("id")).order_by()
    )
    rate, embed_rate = len(texts_only) / elapsed, len(texts_only) / embedding
    wordpieces = statistics.mean(len(ids) for ids in embedder.token_ids(texts_only))
    print(
        f"  {shape} ({len(rounds)} rounds): {outcomes}, {len(texts_only)} chunks of {statistics.mean(tokens):.0f} "
        f"tokens (cl100k; {wordpieces:.0f} word pieces) in {elapsed:.1f} s\n"
        f"    end to end {rate:.1f} chunks/s, embedding alone {embed_rate:.1f} chunks/s: "
        f"ratio {rate / embed_rate:.2f} (goal >= 0.90); {(elapsed - embedding) * 1000 / documents:.1f} ms a "
        "document on top of embedding"
    )


def evaluate(knowledge_base, queries, qrels, modes, top_chunks: int = 30) -> dict[str, dict[str, float]]:
    from knowledge import embedders
    from knowledge.retrieval import clear_query_vectors, search

    results = {}
    for label, mode, fusion in modes:
        # The re-ranker embeds candidates within a time budget: through the real model, so the cache cannot let it
        # score more of them than it could.
        cached = embedders._local_multilingual
        if label == "reranked":
            embedders._local_multilingual = getattr(cached, "inner", cached)
        ndcg, recall, mrr, times = [], [], [], []
        for query_id, text in queries.items():
            clear_query_vectors()  # every query pays for its embedding
            started = time.perf_counter()
            hits = search(knowledge_base, text, top_k=top_chunks, mode=mode, fusion=fusion, rerank=label == "reranked")
            times.append((time.perf_counter() - started) * 1000)
            ranked = list(dict.fromkeys(hit.document_name for hit in hits))
            grades = qrels[query_id]
            ndcg.append(ndcg_at(ranked, grades))
            recall.append(recall_at(ranked, grades))
            mrr.append(mrr_at(ranked, grades))
        embedders._local_multilingual = cached
        results[label] = {
            "ndcg": statistics.mean(ndcg),
            "recall": statistics.mean(recall),
            "mrr": statistics.mean(mrr),
            "p50": percentile(times, 50),
            "p95": percentile(times, 95),
        }
    return results


def print_results(name: str, results: dict[str, dict[str, float]], goal: float, queries: int) -> None:
    print(f"  {name} ({queries} queries)      nDCG@10  recall@10  MRR@10   p50 ms   p95 ms")
    for label, r in results.items():
        print(
            f"    {label:22s} {r['ndcg']:7.3f}  {r['recall']:9.3f}  {r['mrr']:6.3f}  {r['p50']:7.1f}  {r['p95']:7.1f}"
        )
    singles = max(results.get("keyword", {}).get("ndcg", 0), results.get("vector", {}).get("ndcg", 0))
    hybrid = results.get("hybrid", {}).get("ndcg")
    if hybrid is not None:
        print(
            f"    hybrid / better single: {hybrid / singles:.3f} (goal >= 1); hybrid / goal {goal}: "
            f"{hybrid / goal:.3f} (goal >= 1)"
        )


def scale_test(
    tenant,
    source,
    sizes: list[int],
    queries: dict[str, str],
    *,
    own_index: bool,
    rounds: int,
    seed: int = 7,
    write_count: int = 1280,
) -> None:
    """Knowledge bases of `sizes` chunks made from `source`'s chunks (vectors replicated with noise), in the same
    table as `source` (a multi-tenant table's shape: another knowledge base's chunks lie nearer to the queries).
    With `own_index`, each also gets its own HNSW index, and the query timings alternate, `rounds` times, between
    the shared index alone (the own index dropped in a transaction that is rolled back) and the own index."""
    from django.db import connection

    from knowledge import vectorstore
    from knowledge.models import Chunk, Document, KnowledgeBase
    from knowledge.retrieval import clear_query_vectors, search

    rows = list(source.chunks.values_list("text", "terms", "embedding", "embedding_model", "embedding_dim"))
    rng = np.random.default_rng(seed)
    built = []
    for size in sizes:
        knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=f"scale {size}")
        document = make_document(knowledge_base, "scale.txt", "replicated chunks")
        started = time.perf_counter()
        batch = []
        for i, (text, terms, vector, model, dim) in enumerate(replicas(rows, size, rng)):
            batch.append(
                Chunk(
                    tenant=tenant,
                    knowledge_base=knowledge_base,
                    document=document,
                    position=i,
                    text=text,
                    terms=terms,
                    embedding=vector,
                    embedding_model=model,
                    embedding_dim=dim,
                )
            )
            if len(batch) == 2000:
                Chunk.objects.bulk_create(batch)
                batch = []
        if batch:
            Chunk.objects.bulk_create(batch)
        KnowledgeBase.objects.filter(pk=knowledge_base.pk).update(revision=1)
        Document.objects.filter(pk=document.pk).update(chunk_count=size)
        knowledge_base.refresh_from_db()
        built.append((size, knowledge_base, document))
        print(f"  {size} chunks written in {time.perf_counter() - started:.0f} s", flush=True)
    dimension = rows[0][4]
    started = time.perf_counter()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET maintenance_work_mem = '512MB'")
            cursor.execute("ANALYZE knowledge_chunk")
    vectorstore.ensure_index(dimension)
    print(f"  index ({vectorstore.backend_name()}) ready in {time.perf_counter() - started:.0f} s", flush=True)
    own = own_index and vectorstore.uses_pgvector()
    if own:
        from django.test import override_settings

        for size, knowledge_base, _ in built:
            started = time.perf_counter()
            with override_settings(KNOWLEDGE_OWN_INDEX_MIN_CHUNKS=1):
                vectorstore.ensure_own_index(knowledge_base.pk, dimension)
            name = vectorstore.own_index_name(dimension, knowledge_base.pk)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_relation_size(%s::regclass)", [name])
                (index_bytes,) = cursor.fetchone()
            print(
                f"  {size} chunks: own index {name} built in {time.perf_counter() - started:.0f} s "
                f"({index_bytes / 2**20:.0f} MB)",
                flush=True,
            )
    texts = list(queries.values())

    def timed(knowledge_base, mode: str) -> list[float]:
        search(knowledge_base, texts[0], mode=mode, top_k=10)  # builds the in-process structures once
        times = []
        for _ in range(3):
            for text in texts:
                clear_query_vectors()
                started = time.perf_counter()
                search(knowledge_base, text, mode=mode, top_k=10)
                times.append((time.perf_counter() - started) * 1000)
        return times

    def report(size: int, label: str, mode: str, times: list[float]) -> None:
        p95 = percentile(times, 95)
        print(
            f"  {size} chunks, {label}{mode:7s}: p50 {percentile(times, 50):6.1f} ms  p95 {p95:6.1f} ms  "
            f"(goal p95 < 50 ms: {50 / p95:.2f}x)",
            flush=True,
        )

    for size, knowledge_base, _ in built:
        report(size, "", "keyword", timed(knowledge_base, "keyword"))
        for round_number in range(1, max(1, rounds) + 1):
            for variant in ("shared index", "own index") if own else ("",):
                label = f"round {round_number}, {variant}, " if own else ""
                with own_index_hidden(knowledge_base, dimension, hide=variant == "shared index"):
                    for mode in ("vector", "hybrid"):
                        report(size, label, mode, timed(knowledge_base, mode))
                    print_plan(knowledge_base, texts[0], f"{size} chunks, {variant or 'plan'}")
    size, knowledge_base, document = built[-1]
    if own:
        measure_write_cost(
            knowledge_base, document, rows, dimension, rounds=max(1, rounds), seed=seed, count=write_count
        )
    measure_refresh(knowledge_base, document, rows, texts[0])


def replicas(rows: list[tuple], count: int, rng: np.random.Generator):
    """`count` chunks (text, terms, vector, model, dimension) made from `rows` in turn: each source vector plus
    Gaussian noise of length ~0.5 (cosine ~0.9 to its source), re-normalised; text and terms copied."""
    base = np.asarray([row[2] for row in rows], dtype=np.float32)
    noise = 0.5 / math.sqrt(base.shape[1])
    for i in range(count):
        text, terms, _, model, dim = rows[i % len(rows)]
        vector = base[i % len(rows)] + rng.normal(0, noise, base.shape[1]).astype(np.float32)
        yield text, terms, (vector / np.linalg.norm(vector)).tolist(), model, dim


def measure_write_cost(knowledge_base, document, rows, dimension: int, *, rounds: int, seed: int, count: int = 1280):
    """What the knowledge base's own index adds to ingestion's writes: `count` more chunks (replicated vectors)
    written as ingestion writes them (bulk inserts of EMBED_BATCH chunks with their vectors), with the own index and
    with the shared one alone, alternately, each inside a transaction that is rolled back (the knowledge base stays
    as it was); and the same chunk texts embedded, for scale."""
    from django.db import transaction

    from knowledge.embedders import embedder_for
    from knowledge.ingest import EMBED_BATCH
    from knowledge.models import Chunk

    chunks = list(replicas(rows, count, np.random.default_rng(seed + 1)))

    def write() -> float:
        started = time.perf_counter()
        for start in range(0, count, EMBED_BATCH):
            Chunk.objects.bulk_create(
                Chunk(tenant_id=knowledge_base.tenant_id, knowledge_base=knowledge_base, document=document,
                      position=10_000_000 + start + n, text=text, terms=terms, embedding=vector,
                      embedding_model=model, embedding_dim=dim)
                for n, (text, terms, vector, model, dim) in enumerate(chunks[start : start + EMBED_BATCH])
            )  # fmt: skip
        return time.perf_counter() - started

    totals = {"shared index only": 0.0, "shared + own index": 0.0}
    for _ in range(rounds):
        for label in totals:
            hidden = own_index_hidden(knowledge_base, dimension, hide=label == "shared index only")
            with hidden, transaction.atomic():
                totals[label] += write()
                transaction.set_rollback(True)
    sample = [text for text, *_ in chunks[:EMBED_BATCH]]
    embedder = embedder_for(knowledge_base)
    embedder.embed(sample[:2])
    started = time.perf_counter()
    embedder.embed(sample)
    embed_ms = (time.perf_counter() - started) * 1000 / len(sample)
    per_chunk = {label: total * 1000 / (count * rounds) for label, total in totals.items()}
    extra = per_chunk["shared + own index"] - per_chunk["shared index only"]
    print(
        f"  writes of {count} chunks into {knowledge_base.chunks.count()} ({rounds} rounds): "
        + ", ".join(f"{label} {ms:.2f} ms a chunk" for label, ms in per_chunk.items())
        + f"; the own index adds {extra:.2f} ms a chunk, against {embed_ms:.1f} ms to embed one "
        f"({extra / embed_ms:.1%} of ingestion)",
        flush=True,
    )


@contextlib.contextmanager
def own_index_hidden(knowledge_base, dimension: int, *, hide: bool):
    """With `hide`, the knowledge base's own index is dropped in a transaction that is rolled back afterwards: the
    queries meanwhile see the shared index alone, as before the own index was built."""
    if not hide:
        yield
        return
    from django.db import connection, transaction

    from knowledge import vectorstore

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX {vectorstore.own_index_name(dimension, knowledge_base.pk)}")
        yield
        transaction.set_rollback(True)


def print_plan(knowledge_base, query: str, label: str) -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    from knowledge import vectorstore
    from knowledge.embedders import embedder_for

    embedder = embedder_for(knowledge_base)
    vector = embedder.embed([query], query=True)[0]
    plan = vectorstore.PgvectorBackend().explain(knowledge_base, model=embedder.model, vector=vector, k=10)
    plan = re.sub(r"'\[[^']*\]'", "'[...]'", plan)
    print(f"  plan ({label}): " + " | ".join(line.strip() for line in plan.splitlines()[:4]), flush=True)


def measure_refresh(knowledge_base, document, rows, query: str, changed: int = 20) -> None:
    """The first search after a change (`changed` chunks added and as many deleted, the revision bumped): what a
    process pays to catch up, per mode, against the first search of all (the full build)."""
    from django.db.models import F

    from knowledge.models import Chunk, KnowledgeBase
    from knowledge.retrieval import clear_caches, search

    def first_search(mode: str) -> float:
        started = time.perf_counter()
        search(knowledge_base, query, mode=mode, top_k=10)
        return time.perf_counter() - started

    clear_caches()
    full = {mode: first_search(mode) for mode in ("keyword", "vector")}
    top = knowledge_base.chunks.order_by("-position").values_list("position", flat=True).first() or 0
    added = [
        Chunk(
            tenant=knowledge_base.tenant,
            knowledge_base=knowledge_base,
            document=document,
            position=top + 1 + i,
            text=text,
            terms=terms,
            embedding=embedding,
            embedding_model=model,
            embedding_dim=dim,
        )
        for i, (text, terms, embedding, model, dim) in enumerate(rows[:changed])
    ]
    Chunk.objects.bulk_create(added)
    Chunk.objects.filter(
        pk__in=list(knowledge_base.chunks.order_by("id").values_list("id", flat=True)[:changed])
    ).delete()
    KnowledgeBase.objects.filter(pk=knowledge_base.pk).update(revision=F("revision") + 1)
    knowledge_base.refresh_from_db()
    for mode in ("keyword", "vector"):
        print(
            f"  first {mode} search: {full[mode] * 1000:.0f} ms cold, {first_search(mode) * 1000:.0f} ms after "
            f"+{changed}/-{changed} chunks (the process reads only the difference)"
        )


def main() -> None:
    parser = bench_parser(
        __doc__,
        smoke="each set cut to its first 3 queries and about 60 documents (theirs and others), embedded with no cache; "
        "ingestion speed on a 10-chunk document and 6 small ones, 1 round; --scale 300 with --own-index (on pgvector) "
        "and 64 chunks written, 1 round; any document that fails to ingest fails the run",
    )
    parser.add_argument("--database", default="sqlite", help="sqlite, pgvector (127.0.0.1:5433/kb_bench) or a URL")
    parser.add_argument("--sets", default="en_dbpedia,zh_cmrc2018")
    parser.add_argument("--split", default="", help="qrels split (default: test / dev; cmrc2018 also has trial)")
    parser.add_argument("--max-queries", type=int, default=0)
    parser.add_argument(
        "--embedders",
        default="local,local_multilingual",
        help="local models to compare (each set is ingested once per model)",
    )
    parser.add_argument(
        "--traditional-queries", action="store_true", help="ask in traditional Chinese (OpenCC s2t of the queries)"
    )
    parser.add_argument("--no-rerank", action="store_true", help="leave out the re-ranked row (slow on MiniLM bases)")
    parser.add_argument("--no-fold", action="store_true", help="keyword terms without traditional->simplified folding")
    parser.add_argument("--fusions", default="zscore", help="fusions to compare for hybrid, e.g. zscore,rrf,rrf_plain")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "agentplat-kb-bench" / "vectors.sqlite3"))
    parser.add_argument("--ingest-chunks", type=int, default=200, help="chunks in the ingestion-speed document")
    parser.add_argument("--ingest-chunk-size", type=int, default=230, help="its chunk size (230: ~200-token chunks)")
    parser.add_argument(
        "--ingest-small", type=int, default=0, help="also ingest this many small documents (en_dbpedia entries)"
    )
    parser.add_argument(
        "--ingest-rounds", type=int, default=3, help="ingestion and embedding alone alternate this many times"
    )
    parser.add_argument(
        "--ingest-workers",
        default="",
        help="also ingest the small documents on this many Celery workers, e.g. 1,2 (needs REDIS_URL)",
    )
    parser.add_argument(
        "--ingest-embedder", default="local", help="the local model for the ingestion speed (local, local_multilingual)"
    )
    parser.add_argument(
        "--scale", default="", help="also time queries over knowledge bases of these sizes (chunks), e.g. 100000"
    )
    parser.add_argument(
        "--own-index",
        action="store_true",
        help="with --scale: give each of those knowledge bases its own HNSW index, and time with and without it",
    )
    parser.add_argument("--scale-rounds", type=int, default=2, help="with --own-index: timing rounds of each")
    args = parser.parse_args()
    if args.smoke:
        args.max_queries, args.ingest_chunks, args.ingest_small, args.ingest_rounds = 3, 10, 6, 1
        args.scale, args.own_index, args.scale_rounds = args.scale or "300", True, 1
        args.cache = str(Path(tempfile.mkdtemp(prefix="kb-smoke-")) / "vectors.sqlite3")
    check_needs(args)

    url = prepare_database(args.database)
    setup_django("kb-bench-")
    if args.no_fold:
        from knowledge import keyword

        keyword._simplified = lambda text: text
    from django.db import connection

    from knowledge import embedders, vectorstore
    from tenants.models import Tenant
    from tenants.scope import tenant_scope

    print(f"database: {connection.vendor} ({url.split('@')[-1]}), vector backend: {vectorstore.backend_name()}")
    tenant = Tenant.objects.create(name="kb bench", slug="kb-bench")
    with tenant_scope(tenant):
        if args.ingest_chunks or args.ingest_small or args.ingest_workers:
            texts = list(load_set("en_dbpedia", "test")[0].values())
            measure_ingestion(
                tenant, texts, chunks_wanted=args.ingest_chunks, chunk_size=args.ingest_chunk_size,
                small_documents=args.ingest_small, embedder_kind=args.ingest_embedder,
                workers=[int(count) for count in args.ingest_workers.split(",") if count], rounds_of=args.ingest_rounds,
            )  # fmt: skip
        kinds = [kind for kind in args.embedders.split(",") if kind]
        real = {kind: embedders.local_embedder(kind) for kind in kinds}
        cached = {kind: CachedEmbedder(model, Path(args.cache)) for kind, model in real.items()}
        embedders._local = cached.get("local", embedders._local)
        embedders._local_multilingual = cached.get("local_multilingual", embedders._local_multilingual)
        built = {}
        for name in filter(None, args.sets.split(",")):  # --sets "" measures ingestion only
            split = args.split or SETS[name]["qrels"]
            documents, queries, qrels = load_set(name, split)
            if args.smoke:
                documents, queries = smoke_sample(documents, queries, qrels, keep=args.max_queries, size=60)
            elif args.max_queries:
                queries = dict(list(queries.items())[: args.max_queries])
            if args.traditional_queries:
                import opencc

                to_traditional = opencc.OpenCC("s2t")
                queries = {key: to_traditional.convert(text) for key, text in queries.items()}
            for kind in kinds:
                knowledge_base = ingest_corpus(tenant, name, documents, kind, strict=args.smoke)
                built.setdefault(name, (knowledge_base, queries))
                modes = [("keyword", "keyword", "zscore"), ("vector", "vector", "zscore")]
                fusions = args.fusions.split(",")
                modes += [("hybrid" if i == 0 else f"hybrid {f}", "hybrid", f) for i, f in enumerate(fusions)]
                if not args.no_rerank:
                    modes.append(("reranked", "hybrid", fusions[0]))
                results = evaluate(knowledge_base, queries, qrels, modes)
                print_results(
                    f"{name} [{split}], {kind}, fusion {fusions[0]}", results, SETS[name]["goal"], len(queries)
                )
        print(f"  embeddings computed this run (not cached yet): {sum(c.computed for c in cached.values())}")
        embedders._local = real.get("local", embedders._local)
        embedders._local_multilingual = real.get("local_multilingual", embedders._local_multilingual)
        if args.scale and "en_dbpedia" in built:
            knowledge_base, queries = built["en_dbpedia"]
            sizes = [int(size) for size in args.scale.split(",") if size]
            scale_test(
                tenant, knowledge_base, sizes, queries, own_index=args.own_index, rounds=args.scale_rounds,
                write_count=64 if args.smoke else 1280,
            )  # fmt: skip


if __name__ == "__main__":
    main()
