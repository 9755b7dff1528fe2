"""Per-tenant fairness of ingestion on a real Celery worker (one worker, one process: the worst case): tenant A uploads
a big document, then tenant B a small one; B's is ready long before A's finishes, because A's ingestion goes in
shares that queue behind what else waits. Embeddings come from the scripted server's endpoint, slowed down as a busy
one would be."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from celery import current_app

from core.db import database_sync_to_async
from knowledge.ingest import EMBED_BATCH
from knowledge.models import Chunk, Document, IngestShare
from knowledge.services import document_add, knowledge_base_create
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from tests.processes import celery_workers, require_postgresql

pytestmark = pytest.mark.django_db(transaction=True)

EMBED_DELAY = 0.2  # seconds per embeddings request (one batch of EMBED_BATCH texts)
BIG_BATCHES = 12  # a dozen shares at least


def _knowledge_base(tenant, base_url: str, name: str):
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=base_url, is_default=True,
                             embedding_model="scripted-embed")  # fmt: skip
        return knowledge_base_create(tenant=tenant, name=name, embedder="provider", chunk_size=60, chunk_overlap=10)


def _upload(kb, name: str, content: bytes) -> Document:
    with tenant_scope(kb.tenant):
        return document_add(knowledge_base=kb, name=name, content=content)


def _document(tenant, pk: int) -> Document:
    with tenant_scope(tenant):
        return Document.objects.get(pk=pk)


def _stored(tenant, pk: int) -> tuple[int, int, int]:
    with tenant_scope(tenant):
        chunks = Chunk.objects.filter(document_id=pk)
        return chunks.count(), chunks.filter(embedding_dim__gt=0).count(), IngestShare.objects.count()


async def test_another_tenants_small_upload_is_ready_long_before_a_big_one_on_one_worker(
    tenant, other_tenant, scripted_llm, settings, redis_url, tmp_path
):
    require_postgresql("The worker test")
    scripted_llm.set_script({"rules": [], "embeddings": {"delay": EMBED_DELAY}})
    archive = await database_sync_to_async(_knowledge_base)(tenant, scripted_llm.base_url, "Archive")
    menu = await database_sync_to_async(_knowledge_base)(other_tenant, scripted_llm.base_url, "Menu")
    env = {"TEST_MEDIA_ROOT": str(settings.MEDIA_ROOT), "KNOWLEDGE_INGEST_SLICE_SECONDS": "0.5"}
    with celery_workers(redis_url=redis_url, log_dir=tmp_path, env=env) as workers:
        worker = await asyncio.to_thread(workers.start)  # one worker, one process
        current_app.conf.task_always_eager = False  # uploads queue their ingestion on the broker
        try:
            paragraph = ("Quarterly report on inverter output and panel cleaning. " * 8 + "\n\n").encode()
            big = await database_sync_to_async(_upload)(archive, "archive.txt", paragraph * (EMBED_BATCH * BIG_BATCHES))

            async def embedding():
                document = await database_sync_to_async(_document)(tenant, big.pk)
                return document.stage == "embed" and document.progress > 25

            deadline = time.monotonic() + 60
            while not await embedding():
                assert time.monotonic() < deadline, worker.output()
                await asyncio.sleep(0.1)
            small = await database_sync_to_async(_upload)(menu, "menu.txt", b"Baozi, 3 yuan. Noodles, 8 yuan.")
            uploaded = time.monotonic()

            while (await database_sync_to_async(_document)(other_tenant, small.pk)).status != "ready":
                assert time.monotonic() < uploaded + 60, worker.output()
                await asyncio.sleep(0.05)
            small_waited = time.monotonic() - uploaded
            big_then = await database_sync_to_async(_document)(tenant, big.pk)
            assert big_then.status == "processing" and big_then.progress < 80, (big_then.status, big_then.progress)

            while (big_now := await database_sync_to_async(_document)(tenant, big.pk)).status != "ready":
                assert big_now.status == "processing" and time.monotonic() < uploaded + 120, worker.output()
                await asyncio.sleep(0.1)
            big_waited = time.monotonic() - uploaded
            # The worker logs a task's outcome after the task stored it: wait for both documents' lines.
            deadline = time.monotonic() + 15
            while len(_outcomes(worker.log.read_text(errors="replace"), "ready")) < 2:
                assert time.monotonic() < deadline, worker.output()
                await asyncio.sleep(0.1)
        finally:
            current_app.conf.task_always_eager = True
        log = worker.log.read_text(errors="replace")

    assert small_waited < big_waited / 2, (small_waited, big_waited)
    chunks, embedded, shares = await database_sync_to_async(_stored)(tenant, big.pk)
    assert chunks == big_now.chunk_count >= EMBED_BATCH * BIG_BATCHES / 2 and embedded == chunks
    assert shares == 0  # the run's shares are gone once its chunks are stored
    outcomes = _outcomes(log)
    assert outcomes.count("continue") >= 3 and outcomes.count("ready") == 2, outcomes
    # B's document was done between two shares of A's.
    assert outcomes.index("ready") < len(outcomes) - 1 and outcomes[-1] == "ready", outcomes


def _outcomes(log: str, only: str | None = None) -> list[str]:
    """What each ingestion task returned, in the order the worker logged them."""
    found = re.findall(r"Task knowledge\.ingest_document\[[^\]]+\] succeeded in [\d.]+s: '(\w+)'", log)
    return [outcome for outcome in found if only is None or outcome == only]
