"""Embedders (K3): the local MiniLM against the published reference vectors, batching, the provider endpoint."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.embedders import EmbedderError, Float32MiniLM, ProviderEmbedder, embedder_for, local_embedder
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


def test_int8_model_matches_the_reference(reference):
    """int8 weights move each value by ~1e-3; the direction stays: cosine to the float32 vector above 0.995."""
    local = local_embedder()
    ours, theirs = local.embed(SENTENCES), reference.embed(SENTENCES)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() > 0.995, cosines
    first, _ = PUBLISHED["hello world"]
    np.testing.assert_allclose(ours[0][:3], first, atol=0.01)
    assert local.signature() == "local:all-MiniLM-L6-v2-int8:384"


def test_rows_are_normalised_float32_in_input_order_whatever_the_batching():
    local = local_embedder()
    texts = ["short", "a much longer text " * 40, "medium length sentence here", "", "x"]
    together = local.embed(texts)
    one_by_one = np.stack([local.embed([text])[0] for text in texts])
    assert together.dtype == np.float32 and together.shape == (5, 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)  # padding never changes a vector
    np.testing.assert_allclose(local.embed(texts, batch_size=2), together, atol=1e-5)
    assert local.embed([]).shape == (0, 384)


def test_similar_sentences_are_closer():
    a, b, c = local_embedder().embed(
        ["How do I reset my password?", "I forgot my password, how can I change it?", "The volcano erupted."]
    )
    assert a @ b > a @ c + 0.3


def test_local_is_the_default_embedder(in_tenant):
    knowledge_base = KnowledgeBase.objects.create(name="docs")
    embedder = embedder_for(knowledge_base)
    assert embedder.kind == "local" and embedder.english_only and embedder.dimension == 384


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
