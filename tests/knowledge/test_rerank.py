"""Re-ranking (knowledge.rerank): the hybrid's best candidates re-scored by the local multilingual model, within a
latency budget, where the knowledge base's own embedder cannot read the question."""

from __future__ import annotations

import time

import pytest

from knowledge.keyword import terms_for
from knowledge.models import EmbedderKind
from knowledge.rerank import rerank
from knowledge.retrieval import search
from knowledge.services import document_add, knowledge_base_create
from tenants.scope import tenant_scope

PASSAGES = [
    "用户喜欢在周末看电影。",
    "用户下个月要去成都出差三天。",
    "用户的女儿在学钢琴，每周六上课。",
    "用户对花生过敏，点餐时要避开。",
]
QUESTION = "用户吃东西有什么忌口"  # only "用户" is a shared term: every passage has it


@pytest.fixture
def english_kb(tenant, ingest):
    with tenant_scope(tenant):
        kb = knowledge_base_create(tenant=tenant, name="English model", embedder=EmbedderKind.LOCAL)
    for number, text in enumerate(PASSAGES):
        with tenant_scope(tenant), ingest():
            document_add(knowledge_base=kb, name=f"p{number}.txt", content=text.encode())
    return kb


def test_the_question_shares_one_term_with_every_passage():
    shared = [set(terms_for(QUESTION)) & set(terms_for(text)) for text in PASSAGES]
    assert all(terms == {"用户"} for terms in shared)


def test_reranking_finds_by_meaning_what_the_english_model_cannot_read(tenant, english_kb):
    with tenant_scope(tenant):
        hybrid = search(english_kb, QUESTION, top_k=4)
        reranked = search(english_kb, QUESTION, top_k=4, rerank=True)
    assert hybrid[0].text != PASSAGES[3]  # BM25 alone: the shortest passage with "用户" comes first
    assert reranked[0].text == PASSAGES[3]
    assert "rerank" in reranked[0].scores
    assert sorted(hit.chunk_id for hit in reranked) == sorted(hit.chunk_id for hit in hybrid)


def test_with_no_budget_left_the_hybrid_order_is_kept(tenant, english_kb):
    with tenant_scope(tenant):
        hybrid = search(english_kb, QUESTION, top_k=4)
        started = time.monotonic()
        kept = rerank(QUESTION, list(hybrid), top_k=4, budget_ms=0)
    assert [hit.chunk_id for hit in kept] == [hit.chunk_id for hit in hybrid]
    assert time.monotonic() - started < 0.5


def test_a_knowledge_base_on_the_multilingual_model_is_not_reranked(tenant, ingest):
    with tenant_scope(tenant):
        kb = knowledge_base_create(tenant=tenant, name="multilingual")
    for number, text in enumerate(PASSAGES):
        with tenant_scope(tenant), ingest():
            document_add(knowledge_base=kb, name=f"p{number}.txt", content=text.encode())
    with tenant_scope(tenant):
        hybrid = search(kb, QUESTION, top_k=4)
        reranked = search(kb, QUESTION, top_k=4, rerank=True)
    assert [hit.chunk_id for hit in reranked] == [hit.chunk_id for hit in hybrid]
    assert hybrid[0].text == PASSAGES[3]  # its own vectors already read the question
