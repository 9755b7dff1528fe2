"""Embedders (K3): the local MiniLM against the published reference vectors, batching, the provider endpoint."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge import minilm_onnx
from knowledge.embedders import (
    EmbedderError,
    Float32MiniLM,
    LocalMiniLM,
    ProviderEmbedder,
    embedder_for,
    local_embedder,
)
from knowledge.models import EmbedderKind, KnowledgeBase
from tests.llm.factories import ModelProviderFactory

# sentence-transformers/all-MiniLM-L6-v2, model.encode(text) (mean pooling, normalised): the first three values
# and the last one, as published in the example response of an open-source embedding server's API schema
# ("hello world" and "this is a test", public GitHub code found through code search). Reproduced here to 1e-7 by
# Float32MiniLM, the original float32 weights run in numpy, which makes it the reference for the int8 model.
PUBLISHED = {
    "hello world": ([-0.03447727486491203, 0.03102317824959755, 0.006734970025718212], 0.030206844210624695),
    "this is a test": ([0.0306123998016119, 0.013831381686031818, -0.020843738690018654], -0.04484280198812485),
}
SENTENCES = [
    "hello world",
    "this is a test",
    "The cat sat on the mat while the dog slept by the fire.",
    "Quarterly revenue grew eight percent, driven by subscriptions in Europe and Asia.",
    "How do I reset my password?",
]
LONG_TEXT = (
    "Oceanic Airlines is a fictional airline used in several films, television programs and comic books, "
    "typically works that feature plane crashes, with which a real airline would prefer not to be associated. "
    "The most famous use of the brand is in the television show Lost, where its logo depicts an aboriginal dot "
    "painting that resembles a bullseye or an island. The name has been used since the nineteen-sixties. "
)


@pytest.fixture(scope="module")
def reference() -> Float32MiniLM:
    return Float32MiniLM()


@pytest.mark.parametrize("text", list(PUBLISHED))
def test_float32_reference_reproduces_the_published_vector(reference, text):
    first, last = PUBLISHED[text]
    vector = reference.embed([text])[0]
    assert vector.shape == (384,)
    np.testing.assert_allclose(vector[:3], first, atol=1e-5)
    assert vector[-1] == pytest.approx(last, abs=1e-5)


def test_the_built_graph_in_float32_is_the_reference_model(reference, tmp_path):
    """The fused-operator graph, before quantisation, computes exactly what the numpy reference computes: the
    weights went into the right operators."""
    import onnxruntime

    path = tmp_path / "fp32.onnx"
    minilm_onnx.build(minilm_onnx.weights_path(), path, quantized=False)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    tokenizer = reference._tokenizer
    for text in SENTENCES:
        ids = np.asarray([tokenizer.encode(text).ids], dtype=np.int32)
        hidden = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0][0]
        np.testing.assert_allclose(hidden, reference._hidden(ids[0].tolist()), atol=2e-4)


def test_int8_model_matches_the_reference(reference):
    """Dynamic int8 moves the vectors a little; the direction stays: cosine to the float32 vector above 0.975 for
    every text and 0.985 on average (measured: 0.981-0.995 on these, min 0.987 over 128 chunks of ~170 word
    pieces; en_dbpedia vector nDCG@10 0.517 against 0.520 with the float32-computing int8-weight export)."""
    local = local_embedder()
    texts = [*SENTENCES, LONG_TEXT]
    ours, theirs = local.embed(texts), reference.embed(texts)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() > 0.975 and cosines.mean() > 0.985, cosines
    assert local.signature() == "local:all-MiniLM-L6-v2-qint8:384"


def test_a_vector_never_depends_on_the_other_texts_embedded_with_it():
    local = local_embedder()
    texts = ["short", "a much longer text " * 40, "medium length sentence here", "", "x", LONG_TEXT]
    together = local.embed(texts)
    one_by_one = np.stack([local.embed([text])[0] for text in texts])
    reordered = local.embed(texts[::-1])[::-1]
    assert together.dtype == np.float32 and together.shape == (6, 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(together, one_by_one)  # activations are quantised per text: bit for bit
    np.testing.assert_array_equal(together, reordered)
    assert local.embed([]).shape == (0, 384)


def test_texts_longer_than_the_model_window_are_truncated_not_refused():
    local = local_embedder()
    long = LONG_TEXT * 5  # well over 256 word pieces
    assert len(local._tokenizer.encode(long).ids) == local.max_tokens
    np.testing.assert_array_equal(local.embed([long])[0], local.embed([long + " more words at the end"])[0])


def test_the_model_is_built_once_and_a_damaged_file_is_rebuilt(settings, tmp_path):
    settings.KNOWLEDGE_MODEL_DIR = str(tmp_path)
    path = minilm_onnx.model_file()
    assert path.parent == tmp_path and path.stat().st_size > 10_000_000
    built_at = path.stat().st_mtime_ns
    assert minilm_onnx.model_file() == path and path.stat().st_mtime_ns == built_at  # cached, not rebuilt
    path.write_bytes(b"not a model")
    fresh = LocalMiniLM()
    vector = fresh.embed(["hello world"])[0]
    np.testing.assert_array_equal(vector, local_embedder().embed(["hello world"])[0])
    assert path.stat().st_size > 10_000_000


def test_an_unwritable_model_folder_is_a_clear_embedder_error(settings, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    settings.KNOWLEDGE_MODEL_DIR = str(blocker / "models")
    with pytest.raises(EmbedderError, match="KNOWLEDGE_MODEL_DIR"):
        LocalMiniLM().embed(["hello"])


def test_similar_sentences_are_closer():
    a, b, c = local_embedder().embed(
        ["How do I reset my password?", "I forgot my password, how can I change it?", "The volcano erupted."]
    )
    assert a @ b > a @ c + 0.3


def test_the_local_multilingual_model_is_the_default_embedder(in_tenant):
    knowledge_base = KnowledgeBase.objects.create(name="docs")
    embedder = embedder_for(knowledge_base)
    assert embedder.kind == "local_multilingual" and not embedder.english_only and embedder.dimension == 384
    english = embedder_for(KnowledgeBase.objects.create(name="english docs", embedder=EmbedderKind.LOCAL))
    assert english.kind == "local" and english.english_only and english is local_embedder()


def test_provider_embedder_uses_the_tenants_endpoint(in_tenant, scripted_llm):
    ModelProviderFactory(
        tenant=in_tenant, base_url=scripted_llm.base_url, is_default=True, embedding_model="text-embedding-3-small"
    )
    knowledge_base = KnowledgeBase.objects.create(name="docs", embedder=EmbedderKind.PROVIDER)
    embedder = embedder_for(knowledge_base)
    assert isinstance(embedder, ProviderEmbedder) and not embedder.english_only
    vectors = embedder.embed(["苹果 apple", "banana", "苹果 apple"] + [f"text {i}" for i in range(70)])
    assert vectors.dtype == np.float32 and vectors.shape == (73, 64)  # the fake server's default dimension
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vectors[0], vectors[2])
    assert embedder.dimension == 64 and embedder.signature().endswith(":text-embedding-3-small:64")
    requests = scripted_llm.requests("/embeddings")
    assert [len(r["body"]["input"]) for r in requests] == [64, 9]  # batches of 64
    assert all(r["body"]["model"] == "text-embedding-3-small" for r in requests)


def test_provider_embedder_without_a_model_is_a_clear_error(in_tenant, scripted_llm):
    ModelProviderFactory(tenant=in_tenant, base_url=scripted_llm.base_url, is_default=True, embedding_model="")
    knowledge_base = KnowledgeBase.objects.create(name="docs", embedder=EmbedderKind.PROVIDER)
    with pytest.raises(EmbedderError, match="embedding model"):
        embedder_for(knowledge_base)


def test_provider_embedder_without_a_provider_is_a_clear_error(in_tenant):
    knowledge_base = KnowledgeBase.objects.create(name="docs", embedder=EmbedderKind.PROVIDER)
    with pytest.raises(EmbedderError, match="model provider"):
        embedder_for(knowledge_base)


def test_provider_failure_is_an_embedder_error(in_tenant, scripted_llm):
    ModelProviderFactory(tenant=in_tenant, base_url="http://127.0.0.1:9/v1", is_default=True, embedding_model="e")
    knowledge_base = KnowledgeBase.objects.create(name="docs", embedder=EmbedderKind.PROVIDER)
    with pytest.raises(EmbedderError):
        embedder_for(knowledge_base).embed(["hello"])
