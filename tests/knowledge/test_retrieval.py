"""Search (K4, K5) on the exact backend: keyword, vector, hybrid fusion, several knowledge bases, tenants, caches."""

from __future__ import annotations

import pytest
from django.db.models import F

from knowledge import retrieval, vectorstore
from knowledge.embedders import local_embedder
from knowledge.keyword import terms_for
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.ranking import Ranking, fuse_zscore
from knowledge.retrieval import search, search_many
from tenants.scope import tenant_scope

ENGLISH = [
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France.",
    "Photosynthesis lets plants turn sunlight, water and carbon dioxide into sugar and oxygen.",
    "The stock market fell sharply after the central bank raised interest rates again.",
    "A sourdough starter is a fermented mix of flour and water full of wild yeast.",
    "Python is a programming language known for readable code and a large standard library.",
]
CHINESE = [
    "人工智能正在改变医疗行业，医生用机器学习读取影像。",
    "长城是中国古代的军事防御工程，绵延数千公里。",
    "今年的水稻产量因为干旱而下降，农民希望明年雨水充足。",
    "高铁让北京到上海的旅行时间缩短到四个多小时。",
]


def add_document(knowledge_base: KnowledgeBase, name: str, texts: list[str], *, embed: bool = True) -> Document:
    """Write a document's chunks as ingestion does (terms, vectors of the local model), and bump the revision."""
    document = Document.objects.create(knowledge_base=knowledge_base, name=name, file=f"{name}.txt", file_type="txt")
    embedder = local_embedder(knowledge_base.embedder)
    vectors = embedder.embed(texts) if embed else [None] * len(texts)
    for position, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        Chunk.objects.create(
            knowledge_base=knowledge_base,
            document=document,
            position=position,
            text=text,
            embedding=None if vector is None else tuple(vector.tolist()),
            embedding_model=embedder.model if embed else "",
            embedding_dim=embedder.dimension if embed else 0,
            terms=" ".join(terms_for(text)),
        )
    KnowledgeBase.objects.filter(pk=knowledge_base.pk).update(revision=F("revision") + 1)
    knowledge_base.refresh_from_db()
    if embed:
        vectorstore.ensure_index(embedder.dimension)
    return document


@pytest.fixture
def kb(in_tenant):
    """On the English-only local model (the multilingual one: tests/knowledge/test_e5.py)."""
    knowledge_base = KnowledgeBase.objects.create(name="facts", embedder="local")
    add_document(knowledge_base, "english.txt", ENGLISH)
    add_document(knowledge_base, "中文.txt", CHINESE)
    return knowledge_base


def test_keyword_search_finds_a_chinese_chunk_by_a_segmented_word(kb):
    hits = search(kb, "机器学习", mode="keyword", top_k=3)
    assert hits and hits[0].text == CHINESE[0]
    assert hits[0].document_name == "中文.txt" and hits[0].position == 0
    assert hits[0].scores["keyword"] > 0
    # A word jieba cuts out of a longer run ("人工智能" -> "智能") still finds the chunk.
    assert search(kb, "智能", mode="keyword", top_k=1)[0].text == CHINESE[0]


def test_keyword_search_english_plural_and_case(kb):
    hits = search(kb, "PLANT sugars", mode="keyword", top_k=1)
    assert hits[0].text == ENGLISH[1]


def test_vector_search_finds_by_meaning(kb):
    hits = search(kb, "famous landmark in the French capital", mode="vector", top_k=2)
    assert hits[0].text == ENGLISH[0]
    assert 0 < hits[0].scores["vector"] <= 1.0001
    assert hits[0].score >= hits[1].score


def test_hybrid_search_for_chinese_keeps_the_keyword_ranking(kb):
    """The English-only model cannot read a Chinese query: its vector weight is 0, BM25 decides."""
    keyword = search(kb, "高铁 北京", mode="keyword", top_k=3)
    hybrid = search(kb, "高铁 北京", mode="hybrid", top_k=3)
    assert hybrid[0].text == CHINESE[3]
    assert [h.chunk_id for h in hybrid[: len(keyword)]] == [h.chunk_id for h in keyword]


def test_hybrid_search_english(kb):
    hits = search(kb, "How do plants make sugar from sunlight?", top_k=3)
    assert hits[0].text == ENGLISH[1]
    assert set(hits[0].scores) >= {"keyword", "vector"}


def test_unknown_mode_is_refused(kb):
    with pytest.raises(ValueError):
        search(kb, "x", mode="fuzzy")


def test_empty_query_or_empty_base(kb):
    assert search(kb, "   ") == []
    empty = KnowledgeBase.objects.create(name="empty")
    assert search(empty, "Eiffel Tower") == []


def test_chunks_of_another_embedding_model_are_not_searched(kb):
    Chunk.objects.filter(text=ENGLISH[0]).update(embedding_model="some-other-model")
    KnowledgeBase.objects.filter(pk=kb.pk).update(revision=F("revision") + 1)
    hits = search(kb, "Eiffel Tower in Paris", mode="vector", top_k=10)
    assert ENGLISH[0] not in [hit.text for hit in hits]


def test_search_many_merges_knowledge_bases_and_cites_documents(kb):
    recipes = KnowledgeBase.objects.create(name="recipes", embedder="local")
    add_document(recipes, "bread.md", ["Bake the sourdough loaf at 230 degrees for forty minutes with steam."])
    hits = search_many([kb, recipes], "how long to bake a sourdough loaf", top_k=3)
    names = [(hit.knowledge_base_name, hit.document_name) for hit in hits]
    assert ("recipes", "bread.md") in names
    assert ("facts", "english.txt") in names  # the starter chunk of the other base
    assert hits[0].knowledge_base_name == "recipes"


def test_another_tenants_knowledge_base_is_invisible(kb, tenant, other_tenant):
    with tenant_scope(other_tenant):
        theirs = KnowledgeBase.objects.create(name="secret")
        add_document(theirs, "secret.txt", ["The secret launch code of the Eiffel Tower project is swordfish."])
        assert search(theirs, "secret launch code swordfish", top_k=1)  # visible to its own tenant
    with tenant_scope(tenant):
        for mode in ("hybrid", "vector", "keyword"):
            assert search(theirs, "secret launch code swordfish", mode=mode) == []
            hits = search_many([kb, theirs], "secret launch code swordfish", mode=mode, top_k=20)
            assert hits and all(hit.knowledge_base_id == kb.pk for hit in hits)


def test_cache_is_rebuilt_when_the_revision_changes(kb):
    query = "volcano eruption lava"
    assert all("volcano" not in hit.text for hit in search(kb, query, top_k=3))
    add_document(kb, "volcano.txt", ["The volcano erupted and lava flowed down to the sea."])  # bumps revision
    for mode in ("keyword", "vector", "hybrid"):
        assert "volcano" in search(kb, query, mode=mode, top_k=1)[0].text


def _keyword_scores(kb: KnowledgeBase, query: str) -> dict[int, float]:
    return {hit.chunk_id: hit.score for hit in search(kb, query, mode="keyword", top_k=50)}


def test_a_change_reads_only_the_difference_and_ranks_as_a_full_rebuild(kb, django_assert_max_num_queries):
    """Adding a document adds a segment of its chunks (the old segment object is kept, not rebuilt); deleting
    one masks its chunks; the scores stay exactly those of an index built from scratch over the same chunks."""
    queries = ["tower Paris", "water", "yeast flour", "高铁 北京", "market rates water"]
    search(kb, "warm up", mode="keyword")
    (first,) = retrieval.keyword_segments(kb)
    added = add_document(kb, "more.txt", ["Water towers store water above the town.", "Paris has many bakeries."])
    with django_assert_max_num_queries(4):  # the revision, the chunk ids, the new chunks' terms, the hits
        search(kb, "water", mode="keyword")
    segments = retrieval.keyword_segments(kb)
    assert len(segments) == 2 and segments[0] is first and len(segments[1]) == 2
    incremental = {query: _keyword_scores(kb, query) for query in queries}
    retrieval.clear_caches()
    for query in queries:
        assert _keyword_scores(kb, query) == pytest.approx(incremental[query])

    (whole,) = retrieval.keyword_segments(kb)  # the rebuilt index: one segment
    english = Document.objects.get(knowledge_base=kb, name="english.txt")
    english.delete()
    KnowledgeBase.objects.filter(pk=kb.pk).update(revision=F("revision") + 1)
    kb.refresh_from_db()
    after_delete = {query: _keyword_scores(kb, query) for query in queries}
    assert all("Eiffel" not in hit.text for hit in search(kb, "tower Paris", mode="keyword", top_k=10))
    (masked,) = retrieval.keyword_segments(kb)
    assert masked.ids is whole.ids and len(masked) == len(whole) - len(ENGLISH)  # masked, not rebuilt
    retrieval.clear_caches()
    for query in queries:
        assert _keyword_scores(kb, query) == pytest.approx(after_delete[query])
    assert Chunk.objects.filter(document=added).count() == 2


def test_many_changes_merge_segments_and_still_rank_as_a_full_rebuild(kb):
    search(kb, "warm up", mode="keyword")
    for i in range(retrieval.MAX_SEGMENTS + 3):
        add_document(kb, f"note-{i}.txt", [f"Note {i} mentions water and tower number {i}."], embed=False)
        search(kb, "water", mode="keyword")
        assert len(retrieval.keyword_segments(kb)) <= retrieval.MAX_SEGMENTS
    incremental = _keyword_scores(kb, "water tower")
    assert len(incremental) == retrieval.MAX_SEGMENTS + 3 + 3  # every note, the tower, photosynthesis, sourdough
    retrieval.clear_caches()
    assert _keyword_scores(kb, "water tower") == pytest.approx(incremental)


def test_stale_knowledge_base_object_still_sees_the_new_revision(kb):
    stale = KnowledgeBase.objects.get(pk=kb.pk)
    search(stale, "lava", top_k=1)
    add_document(kb, "volcano.txt", ["The volcano erupted and lava flowed down to the sea."])
    assert "lava" in search(stale, "lava", mode="keyword", top_k=1)[0].text


def _ranking(name: str, weight: float, scores: dict[int, float], floor: float = 0.0) -> Ranking:
    ordered = sorted(scores, key=lambda chunk_id: -scores[chunk_id])
    return Ranking(name, weight, ordered, [scores[c] for c in ordered], floor=floor)


def test_fusion_of_two_agreeing_retrievers_keeps_their_choice():
    keyword = _ranking("keyword", 1.0, {1: 5.0, 2: 4.0, 3: 1.0, 4: 0.5})
    vector = _ranking("vector", 1.0, {1: 0.8, 2: 0.7, 3: 0.3, 4: 0.2}, floor=0.2)
    fused = fuse_zscore([keyword, vector], depth=4)
    assert sorted(fused, key=fused.get, reverse=True)[:2] == [1, 2]


def test_fusion_weight_zero_ignores_a_retriever():
    keyword = _ranking("keyword", 1.0, {1: 5.0, 2: 4.0, 3: 1.0})
    vector = _ranking("vector", 0.0, {3: 0.9, 2: 0.1, 1: 0.0})
    fused = fuse_zscore([keyword, vector], depth=3)
    assert sorted(fused, key=fused.get, reverse=True) == [1, 2, 3]


def test_a_chunk_without_the_query_words_is_not_pushed_down_for_it():
    """Chunk 9 is the model's best and shares no word with the query (BM25 0, far below BM25's average): that is no
    evidence against it, so it ranks above chunk 3, which both retrievers rank near the top. Counted as negative
    evidence (the signed fusion) it fell below."""
    keyword = _ranking("keyword", 1.0, {1: 9.0, 3: 5.0, 2: 4.0, 4: 3.5, 5: 3.0, 6: 2.5})
    vector = _ranking("vector", 1.0, {9: 0.90, 1: 0.80, 3: 0.72, 7: 0.60, 8: 0.58, 2: 0.55}, floor=0.55)
    keyword.extra.update({9: 0.0, 7: 0.0, 8: 0.0})
    vector.extra.update({4: 0.55, 5: 0.55, 6: 0.55})
    fused = fuse_zscore([keyword, vector], depth=6)
    assert fused[9] > fused[3]
    signed = fuse_zscore([keyword, vector], depth=6, signed=True, by_confidence=False)
    assert signed[9] < signed[3]


def test_the_retriever_whose_best_stands_out_is_trusted_more_for_that_query():
    """The keyword list is nearly flat (its first is barely above the rest); the model's first stands far above its
    others. Equal weights tie their firsts; weighted by confidence the model's first wins."""
    keyword = _ranking("keyword", 1.0, {1: 5.2, 2: 5.0, 3: 4.9, 4: 4.8, 5: 4.7})
    vector = _ranking("vector", 1.0, {6: 0.95, 7: 0.40, 8: 0.38, 9: 0.37, 10: 0.36}, floor=0.36)
    for chunk_id in (1, 2, 3, 4, 5):
        vector.extra[chunk_id] = 0.36
    for chunk_id in (6, 7, 8, 9, 10):
        keyword.extra[chunk_id] = 0.0
    fused = fuse_zscore([keyword, vector], depth=5)
    assert max(fused, key=fused.get) == 6
    assert fused[6] > 1.5 * fused[1]


def test_a_retriever_that_cannot_read_the_query_cannot_drag_the_better_one_down():
    """The issue's case: BM25 is right, the English-only model reading Chinese is noise. With the language
    weight the fused ranking is BM25's (never below the better retriever); plain RRF lets the noise in."""
    from knowledge.embedders import LocalMiniLM

    weight = retrieval.vector_weight(LocalMiniLM(), "长城有多长？")
    assert weight == 0.0
    keyword = _ranking("keyword", 1.0, {1: 9.0, 2: 7.0, 3: 2.0, 4: 1.0})
    noise = _ranking("vector", weight, {4: 0.31, 3: 0.30, 5: 0.29, 2: 0.10, 1: 0.05}, floor=0.05)
    fused = fuse_zscore([keyword, noise], depth=5)
    assert sorted(fused, key=fused.get, reverse=True)[:4] == [1, 2, 3, 4]
    plain = retrieval.FUSIONS["rrf_plain"]([keyword, noise])
    assert sorted(plain, key=plain.get, reverse=True)[:2] != [1, 2]


def test_vector_weight_follows_the_query_language():
    from types import SimpleNamespace

    from knowledge.embedders import LocalMiniLM

    english_only = LocalMiniLM()
    assert retrieval.vector_weight(english_only, "Where is the Eiffel Tower?") == 1.0
    assert retrieval.vector_weight(english_only, "埃菲尔铁塔在哪里") == 0.0
    assert 0.3 < retrieval.vector_weight(english_only, "Eiffel 铁塔在哪里") < 0.8
    multilingual = SimpleNamespace(english_only=False)  # e.g. bge-m3 through the provider
    assert retrieval.vector_weight(multilingual, "埃菲尔铁塔在哪里") == 1.0
