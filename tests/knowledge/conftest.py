"""Fixtures of the knowledge tests: uploaded files go to a temporary MEDIA_ROOT; a knowledge base per tenant."""

from __future__ import annotations

import pytest

from knowledge.services import knowledge_base_create
from tenants.scope import tenant_scope


@pytest.fixture(autouse=True)
def _media_root(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")


@pytest.fixture
def kb(tenant):
    """A knowledge base of `tenant` with the local embedder and small chunks."""
    with tenant_scope(tenant):
        return knowledge_base_create(tenant=tenant, name="Solar notes", chunk_size=60, chunk_overlap=15)


@pytest.fixture
def other_kb(other_tenant):
    with tenant_scope(other_tenant):
        return knowledge_base_create(tenant=other_tenant, name="Noodle secrets")


@pytest.fixture
def ingest(django_capture_on_commit_callbacks):
    """Run what a service queued on commit (the ingestion task; Celery is eager in tests) inside the test's
    transaction: `with ingest(): document_add(...)`."""

    def _ingest():
        return django_capture_on_commit_callbacks(execute=True)

    return _ingest
