"""A large knowledge base's own HNSW index on a real Celery worker (pgvector): the worker's ingestion notices the
threshold, queues the build, and runs it as deployed (`CREATE INDEX CONCURRENTLY` in autocommit, outside any
transaction), and the knowledge base's deletion has the worker drop it."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from celery import current_app
from django.db import connection

from core.db import database_sync_to_async
from knowledge import vectorstore
from knowledge.models import Document
from knowledge.services import document_add, knowledge_base_create, knowledge_base_delete
from tenants.scope import tenant_scope
from tests.processes import celery_workers, require_postgresql

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.pgvector]

THRESHOLD = 5
PARAGRAPHS = [
    "Ospreys dive feet first to catch fish near the surface of lakes and rivers.",
    "The violin has four strings tuned in fifths and is played with a bow.",
    "Glaciers carve U-shaped valleys as they slowly move downhill under their own weight.",
    "Sourdough bread rises with wild yeast and lactic acid bacteria from a starter.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "The Eiffel Tower was built for the 1889 World's Fair in Paris.",
    "Solar panels lose some output when dust settles on their glass.",
    "A haiku has three lines of five, seven and five syllables.",
]


def _index_state(name: str) -> bool | None:
    """None: no such index; else whether PostgreSQL marks it valid (a concurrent build in progress is not)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s", [name]
        )
        row = cursor.fetchone()
    return None if row is None else bool(row[0])


def _create(tenant):
    with tenant_scope(tenant):
        return knowledge_base_create(tenant=tenant, name="Field notes", embedder="local", chunk_size=32,
                                     chunk_overlap=0)  # fmt: skip


def _upload(knowledge_base) -> Document:
    with tenant_scope(knowledge_base.tenant):
        text = "\n\n".join(f"Note {number}. {line}" for number, line in enumerate(PARAGRAPHS * 3, start=1))
        return document_add(knowledge_base=knowledge_base, name="notes.txt", content=text.encode())


def _status(tenant, pk: int) -> tuple[str, int]:
    with tenant_scope(tenant):
        document = Document.objects.get(pk=pk)
        return document.status, document.chunk_count


def _delete(knowledge_base) -> None:
    with tenant_scope(knowledge_base.tenant):
        knowledge_base_delete(knowledge_base=knowledge_base)


async def _until(check, what: str, worker, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, f"{what}:\n{worker.output()}"
        await asyncio.sleep(0.2)


async def test_the_worker_builds_the_index_concurrently_and_drops_it_with_the_knowledge_base(
    pgvector_db, tenant, settings, redis_url, tmp_path
):
    require_postgresql("The worker test")
    settings.KNOWLEDGE_OWN_INDEX_MIN_CHUNKS = THRESHOLD
    knowledge_base = await database_sync_to_async(_create)(tenant)
    name = vectorstore.own_index_name(384, knowledge_base.pk)
    env = {"TEST_MEDIA_ROOT": str(settings.MEDIA_ROOT), "KNOWLEDGE_OWN_INDEX_MIN_CHUNKS": str(THRESHOLD)}
    with celery_workers(redis_url=redis_url, log_dir=tmp_path, env=env) as workers:
        worker = await asyncio.to_thread(workers.start)
        current_app.conf.task_always_eager = False  # the upload's ingestion, then the build, go through the broker
        try:
            document = await database_sync_to_async(_upload)(knowledge_base)

            async def ready() -> bool:
                return (await database_sync_to_async(_status)(tenant, document.pk))[0] == "ready"

            await _until(ready, "the document was not ingested", worker)
            _status_now, chunks = await database_sync_to_async(_status)(tenant, document.pk)
            assert chunks > THRESHOLD

            async def built() -> bool:
                return await database_sync_to_async(_index_state)(name) is True

            await _until(built, "the worker did not build the knowledge base's own index", worker)
            await database_sync_to_async(_delete)(knowledge_base)

            async def dropped() -> bool:
                return await database_sync_to_async(_index_state)(name) is None

            await _until(dropped, "the worker did not drop the deleted knowledge base's index", worker, seconds=30)
            log = worker.log.read_text(errors="replace")
        finally:
            current_app.conf.task_always_eager = True
    assert re.search(r"Task knowledge\.build_vector_index\[[^\]]+\] succeeded in [\d.]+s: True", log), log
    assert re.search(rf"Task knowledge\.drop_vector_indexes\[[^\]]+\] succeeded in [\d.]+s: \['{name}'\]", log), log
