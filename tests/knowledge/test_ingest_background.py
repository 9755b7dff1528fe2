"""Without a Celery worker (the embedded default), an upload answers at once and a background thread of the
process ingests it, so the page can show the progress as it would with a worker."""

from __future__ import annotations

import time

import pytest

from knowledge.models import Document
from knowledge.services import document_add, knowledge_base_create
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_upload_is_ingested_on_a_background_thread(tenant, settings):
    settings.KNOWLEDGE_INGEST_IN_THREAD = True
    with tenant_scope(tenant):
        knowledge_base = knowledge_base_create(tenant=tenant, name="Notes")
        document = document_add(knowledge_base=knowledge_base, name="notes.txt", content=b"Solar panels face south.")
        # The service returned before ingestion: the row is still waiting or just started.
        assert Document.objects.get(pk=document.pk).status in {"pending", "processing"}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            document.refresh_from_db()
            if document.status not in {"pending", "processing"}:
                break
            time.sleep(0.1)
    assert document.status == "ready", document.error
    assert document.progress == 100 and document.chunk_count == 1
