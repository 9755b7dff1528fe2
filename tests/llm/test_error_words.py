"""Issue 36: a model provider's failure reads in the reader's language wherever it becomes text (the gateway's
message, never LLMError's English `str`): a provider that refuses the connection, for a knowledge base's embedder."""

from __future__ import annotations

import pytest
from django.utils import translation

from knowledge.embedders import EmbedderError, embedder_for
from knowledge.models import EmbedderKind, KnowledgeBase
from llm import errors
from tests.llm.factories import ModelProviderFactory

pytestmark = pytest.mark.django_db

NOTHING_LISTENS = "http://127.0.0.1:9/v1"  # the connection is refused


@pytest.mark.parametrize("language", ["zh-hans", "en"])
def test_an_embedder_whose_provider_refuses_the_connection_says_so_in_the_readers_language(in_tenant, language):
    ModelProviderFactory(tenant=in_tenant, base_url=NOTHING_LISTENS, is_default=True, embedding_model="e",
                         max_retries=0, private_network_allowed=True)  # fmt: skip
    knowledge_base = KnowledgeBase.objects.create(name="docs", embedder=EmbedderKind.PROVIDER)
    with translation.override(language), pytest.raises(EmbedderError) as failed:
        embedder_for(knowledge_base).embed(["hello"])
    assert str(failed.value) == errors.message_for(errors.PROVIDER_UNREACHABLE, language)
    assert "[provider_unreachable]" not in str(failed.value)
    if language == "zh-hans":
        assert str(failed.value).startswith("无法连接模型服务商。")
