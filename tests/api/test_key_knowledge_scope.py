"""A key limited to some agents reads only the knowledge bases those agents use (issue 34: it read every knowledge base
of its tenant through the REST API). Used means attached to the agent's draft or frozen in its published version;
every other knowledge base answers 404 as another tenant's does. A key without an agent limit reads them all."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.services import agent_publish, agent_update
from api.models import KeyScope
from knowledge.ingest import ingest_in_scope
from knowledge.services import document_add, knowledge_base_create
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db


@pytest.fixture
def bases(tenant, other_tenant, published, settings, tmp_path) -> dict:
    """`manual`: pv's draft and version; `frozen`: only in pv's published version; `drafted`: only in pv's draft;
    `prices`: solar's; `loose`: no agent's; `foreign`: another tenant's. Each with one document, ingested."""
    settings.MEDIA_ROOT = str(tmp_path)
    made = {}
    for owner, name in [(tenant, n) for n in ("manual", "frozen", "drafted", "prices", "loose")] + [
        (other_tenant, "foreign")
    ]:
        with tenant_scope(owner):
            made[name] = knowledge_base_create(tenant=owner, name=name, embedder="local")
            content = f"Panels face south ({name}).".encode()
            document = document_add(knowledge_base=made[name], name=f"{name}.txt", content=content, queue=False)
            assert ingest_in_scope(document_id=document.pk) == "ready"
    with tenant_scope(tenant):
        agent_update(agent=published.pv, knowledge_bases=[made["manual"], made["frozen"]])
        agent_publish(agent=published.pv, user=None)
        agent_update(agent=published.pv, knowledge_bases=[made["manual"], made["drafted"]])
        agent_update(agent=published.solar, knowledge_bases=[made["prices"]])
        agent_publish(agent=published.solar, user=None)
    return made


def _api(secret: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_ACCEPT_LANGUAGE="en")


def _urls(knowledge_base) -> list[str]:
    """Every read of one knowledge base: itself, a search, its documents and one document."""
    base = f"/api/v1/knowledge-bases/{knowledge_base.pk}"
    with tenant_scope(knowledge_base.tenant):
        document = knowledge_base.documents.get()
    return [f"{base}/", f"{base}/search/?q=panels&mode=keyword", f"{base}/documents/",
            f"{base}/documents/{document.pk}/"]  # fmt: skip


def _names(client: Client) -> set[str]:
    response = client.get("/api/v1/knowledge-bases/")
    assert response.status_code == 200
    return {row["name"] for row in response.json()["results"]}


def test_a_key_limited_to_an_agent_reads_only_the_knowledge_bases_it_uses(tenant_admin, make_key, published, bases):
    _key, secret = make_key(tenant_admin, agents=[published.pv])
    client = _api(secret)
    assert _names(client) == {"manual", "frozen", "drafted"}
    for name in ("manual", "frozen", "drafted"):
        for url in _urls(bases[name]):
            assert client.get(url).status_code == 200, url
    hits = client.get(f"/api/v1/knowledge-bases/{bases['manual'].pk}/search/?q=panels&mode=keyword").json()
    assert hits and all("(manual)" in hit["text"] for hit in hits)
    for name in ("prices", "loose", "foreign"):
        for url in _urls(bases[name]):
            response = client.get(url)
            assert response.status_code == 404, url
            assert response.json()["error"]["code"] == "not_found" and "panels" not in response.content.decode()


def test_a_limited_key_is_refused_another_knowledge_base_as_another_tenants_is(tenant_admin, make_key, published,
                                                                               bases):  # fmt: skip
    _key, secret = make_key(tenant_admin, agents=[published.solar])
    client = _api(secret)
    ours = client.get(f"/api/v1/knowledge-bases/{bases['manual'].pk}/")
    theirs = client.get(f"/api/v1/knowledge-bases/{bases['foreign'].pk}/")
    assert ours.status_code == theirs.status_code == 404
    assert ours.json() == theirs.json()  # the same answer: nothing tells that it exists


def test_a_limited_key_that_writes_reads_its_agents_knowledge_bases_only(tenant_admin, make_key, published, bases):
    """With `write` and an administrator, the key reaches its agents' drafts too (api.rest), and no more bases."""
    _key, secret = make_key(tenant_admin, agents=[published.solar], scopes=list(KeyScope.values))
    assert _names(_api(secret)) == {"prices"}


def test_a_key_without_an_agent_limit_reads_every_knowledge_base_of_its_tenant(tenant_admin, make_key, bases):
    _key, secret = make_key(tenant_admin)
    client = _api(secret)
    assert _names(client) == {"manual", "frozen", "drafted", "prices", "loose"}
    for name in ("manual", "prices", "loose"):
        for url in _urls(bases[name]):
            assert client.get(url).status_code == 200, url
    for url in _urls(bases["foreign"]):
        assert client.get(url).status_code == 404, url


def test_the_scope_is_read_in_a_bounded_number_of_queries(tenant_admin, make_key, published, bases,
                                                          django_assert_max_num_queries):  # fmt: skip
    _key, secret = make_key(tenant_admin, agents=[published.pv, published.solar])
    client = _api(secret)
    with django_assert_max_num_queries(12):
        assert _names(client) == {"manual", "frozen", "drafted", "prices"}
