"""A turn asked for through the OpenAI-compatible endpoint (Daphne serving the project, the openai SDK as the
client) is one trace rooted in the turn, like a chat-page turn (core.tracing; the root is agents.runtime.run_turn,
which every surface's turn passes through)."""

from __future__ import annotations

import openai
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from core import tracing
from tests.core.traces import tree

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.use_provider(tracing.provider_with(SimpleSpanProcessor(exporter)))
    yield exporter
    tracing.reset()


def test_an_openai_api_turn_is_one_trace_rooted_in_the_turn(asgi_live_server, published, tenant, tenant_admin,
                                                            make_key, spans):  # fmt: skip
    _key, secret = make_key(tenant_admin)
    client = openai.OpenAI(base_url=f"{asgi_live_server.url}/v1", api_key=secret, max_retries=0, timeout=20)
    completion = client.chat.completions.create(
        model=published.solar.slug, messages=[{"role": "user", "content": "How many panels?"}]
    )
    finished = spans.get_finished_spans()
    assert tree(finished) == [(0, "invoke_agent Solar advisor"), (1, "chat gpt-4")]
    root, model = sorted(finished, key=lambda span: span.start_time)
    assert root.attributes["gen_ai.conversation.id"] == str(completion.model_extra["conversation_id"])
    assert root.attributes["agentplat.tenant.id"] == str(tenant.pk)
    assert root.attributes["user.id"] == str(tenant_admin.pk)
    assert model.attributes["gen_ai.usage.output_tokens"] == completion.usage.completion_tokens
    assert model.attributes["gen_ai.usage.input_tokens"] == completion.usage.prompt_tokens
