"""Traces (core.tracing): a chat turn's spans with an in-memory exporter, their exact attributes and tree, text only
when the setting allows it, nothing sent when traces are off, feedback as a span, a trace carried to a thread."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from celery.signals import before_task_publish, task_postrun, task_prerun
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from config.celery import app as celery_app
from core import tracing
from core.db import database_sync_to_async
from llm.models import LLMCall
from memory.models import Message
from memory.services import extract_line
from memory.signals import feedback_given
from tenants.scope import tenant_scope
from tests.core.traces import KNOWLEDGE_TOOL, SECRET_KEY, make_conversation, script_tool_turn, tree, turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _extraction_in_the_turn(settings):
    settings.MEMORY_EXTRACT_IN_THREAD = False  # the first turn's memory is there when the second turn recalls


TEXT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.retrieval.query.text",
    "agentplat.memory.lines",
    "agentplat.feedback.comment",
}


def _exporter(capture: bool) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    tracing.use_provider(tracing.provider_with(SimpleSpanProcessor(exporter)), capture=capture)
    return exporter


@pytest.fixture
def spans():
    yield _exporter(capture=False)
    tracing.reset()


@pytest.fixture
def spans_with_text():
    yield _exporter(capture=True)
    tracing.reset()


def _calls(tenant, conversation):
    with tenant_scope(tenant):
        return list(LLMCall.objects.filter(conversation_id=conversation.pk).order_by("id"))


def _by_name(finished):
    return {span.name: span for span in finished}


def _all_text(finished) -> str:
    return json.dumps([dict(span.attributes) for span in finished], ensure_ascii=False, default=str)


async def _traced_second_turn(tenant, member, scripted_llm, exporter):
    """A first turn (remembered), then the turn whose spans the tests read: recall, model, tool, retrieval, model."""
    conversation, knowledge_base = await make_conversation(tenant, member, scripted_llm)
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Noted: you like 香菇黄焖鸡."}})
    await turn(tenant, conversation, "我喜欢香菇黄焖鸡。")
    exporter.clear()
    script_tool_turn(scripted_llm)
    user, reply, _sink = await turn(tenant, conversation, "香菇黄焖鸡多少钱？")
    return conversation, knowledge_base, user, reply, exporter.get_finished_spans()


async def test_a_chat_turn_with_a_tool_call_is_one_tree_with_the_genai_attributes(tenant, member, scripted_llm, spans):
    conversation, knowledge_base, user, reply, finished = await _traced_second_turn(tenant, member, scripted_llm, spans)
    assert tree(finished) == [
        (0, "invoke_agent Waiter"),
        (1, "memory_recall"),
        (1, "chat gpt-4"),
        (1, f"execute_tool {KNOWLEDGE_TOOL}"),
        (2, "retrieval"),
        (1, "chat gpt-4"),
    ]
    assert len({span.context.trace_id for span in finished}) == 1
    named = _by_name(finished)
    root = named["invoke_agent Waiter"]
    identity = {
        "agentplat.tenant.id": str(tenant.pk),
        "gen_ai.agent.id": str(conversation.agent_id),
        "gen_ai.conversation.id": str(conversation.pk),
        "user.id": str(member.pk),
    }
    assert dict(root.attributes) == {
        **identity,
        "gen_ai.operation.name": "invoke_agent",
        "agentplat.message.id": user.pk,
        "agentplat.turn.index": 0,
        "gen_ai.agent.name": "Waiter",
        "agentplat.agent.kind": "chat",
        "gen_ai.request.model": "gpt-4",
        "agentplat.turn.status": "completed",
        "gen_ai.usage.input_tokens": reply.usage["prompt_tokens"],
        "gen_ai.usage.output_tokens": reply.usage["completion_tokens"],
        "agentplat.reply.message_id": reply.pk,
    }
    # Every span of the turn carries its identity.
    assert all(dict(span.attributes).items() >= identity.items() for span in finished)

    calls = await database_sync_to_async(_calls)(tenant, conversation)
    models = [span for span in finished if span.name == "chat gpt-4"]
    assert len(models) == 2 == len(calls[-2:])
    for span, call in zip(models, calls[-2:], strict=True):
        attributes = dict(span.attributes)
        ttft = attributes.pop("gen_ai.response.time_to_first_chunk")
        assert ttft == pytest.approx(call.ttft_ms / 1000) and attributes.pop("agentplat.llm.ttft_ms") == call.ttft_ms
        assert attributes.pop("agentplat.llm.duration_ms") >= 0
        assert attributes == {
            **identity,
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4",
            "gen_ai.request.stream": True,
            "gen_ai.request.temperature": 0.7,
            "agentplat.llm.purpose": "chat",
            "agentplat.llm.tools_offered": 1,
            "gen_ai.response.model": "gpt-4",
            "gen_ai.response.finish_reasons": (call.finish_reason,),
            "gen_ai.usage.input_tokens": call.prompt_tokens,
            "gen_ai.usage.output_tokens": call.completion_tokens,
            "agentplat.llm.usage_source": call.usage_source,
            "agentplat.llm.tool_calls": 1 if call.finish_reason == "tool_calls" else 0,
        }
    assert [span.attributes["gen_ai.response.finish_reasons"] for span in models] == [("tool_calls",), ("stop",)]
    assert sum(span.attributes["gen_ai.usage.input_tokens"] for span in models) == reply.usage["prompt_tokens"]

    assert dict(named[f"execute_tool {KNOWLEDGE_TOOL}"].attributes) == {
        **identity,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": KNOWLEDGE_TOOL,
        "gen_ai.tool.type": "function",
        "agentplat.tool.known": True,
        "agentplat.tool.status": "completed",
        "agentplat.tool.asks_user": False,
    }
    retrieval = dict(named["retrieval"].attributes)
    assert retrieval == {
        **identity,
        "gen_ai.operation.name": "retrieval",
        "gen_ai.data_source.id": str(knowledge_base.pk),
        "agentplat.knowledge_base.ids": (knowledge_base.pk,),
        "agentplat.retrieval.mode": "keyword",
        "agentplat.retrieval.top_k": 5,
        "agentplat.retrieval.rerank": False,
        "agentplat.retrieval.hits": retrieval["agentplat.retrieval.hits"],
        "agentplat.retrieval.hit_knowledge_base_ids": (knowledge_base.pk,),
    }
    assert retrieval["agentplat.retrieval.hits"] >= 1
    recall = dict(named["memory_recall"].attributes)
    assert recall == {
        **identity,
        "agentplat.memory.agent_id": conversation.agent_id,
        "agentplat.memory.user_id": member.pk,
        "agentplat.memory.plan_step": False,
        "agentplat.memory.hits": len(reply.usage["memories"]),
        "agentplat.memory.events": sum(1 for item in reply.usage["memories"] if item["kind"] == "event"),
        "agentplat.memory.memories": sum(1 for item in reply.usage["memories"] if item["kind"] == "memory"),
        "agentplat.memory.turns": sum(1 for item in reply.usage["memories"] if item["kind"] == "turn"),
    }
    assert recall["agentplat.memory.hits"] >= 1  # the first turn's event is recalled
    # No text without the setting, and never the provider's key.
    assert not any(TEXT_KEYS & set(span.attributes) for span in finished)
    everything = _all_text(finished)
    assert "香菇" not in everything and SECRET_KEY not in everything


async def test_text_is_recorded_only_when_the_setting_allows_it(tenant, member, scripted_llm, spans_with_text):
    _conversation, _kb, _user, reply, finished = await _traced_second_turn(
        tenant, member, scripted_llm, spans_with_text
    )
    named = _by_name(finished)
    root = named["invoke_agent Waiter"].attributes
    assert json.loads(root["gen_ai.input.messages"]) == [{"role": "user", "content": "香菇黄焖鸡多少钱？"}]
    assert json.loads(root["gen_ai.output.messages"]) == [{"role": "assistant", "content": reply.content}]
    first, second = [span.attributes for span in finished if span.name == "chat gpt-4"]
    assert json.loads(first["gen_ai.input.messages"])[-1] == {"role": "user", "content": "香菇黄焖鸡多少钱？"}
    assert json.loads(first["gen_ai.output.messages"])[0]["tool_calls"][0]["function"]["name"] == KNOWLEDGE_TOOL
    assert json.loads(second["gen_ai.output.messages"]) == [{"role": "assistant", "content": reply.content}]
    tool = named[f"execute_tool {KNOWLEDGE_TOOL}"].attributes
    assert json.loads(tool["gen_ai.tool.call.arguments"])["query"] == "香菇"
    assert "香菇黄焖鸡" in tool["gen_ai.tool.call.result"]
    assert named["retrieval"].attributes["gen_ai.retrieval.query.text"] == "香菇"
    assert "香菇黄焖鸡" in named["memory_recall"].attributes["agentplat.memory.lines"]
    assert SECRET_KEY not in _all_text(finished)


class _Counter(BaseHTTPRequestHandler):
    posts: list[str] = []

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _Counter.posts.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def otlp_counter(monkeypatch):
    """An HTTP endpoint counting what is posted to it, named in the standard OTLP variable."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{server.server_port}/v1/traces")
    _Counter.posts = []
    yield _Counter.posts
    server.shutdown()
    tracing.reset()


async def test_off_by_default_nothing_is_made_or_sent_and_on_the_setting_sends(
    tenant, member, scripted_llm, settings, otlp_counter
):
    assert settings.TRACES_ENABLED is False  # the default
    tracing.reset()
    conversation, _kb = await make_conversation(tenant, member, scripted_llm)
    script_tool_turn(scripted_llm)
    await turn(tenant, conversation, "香菇黄焖鸡多少钱？")
    assert not tracing.enabled() and tracing._state.provider is None
    assert tracing.flush() and otlp_counter == []
    with tracing.span("anything") as span:
        assert span is tracing.NO_SPAN and not span.is_recording()

    settings.TRACES_ENABLED = True
    tracing.reset()
    script_tool_turn(scripted_llm)
    await turn(tenant, conversation, "香菇黄焖鸡多少钱？")
    assert tracing.enabled() and not tracing.capture_content()
    assert tracing.flush() and otlp_counter and set(otlp_counter) == {"/v1/traces"}


async def test_a_turn_the_sampler_drops_records_nothing_and_runs_as_when_off(tenant, member, scripted_llm):
    """Sampled out (OTEL_TRACES_SAMPLER's job): the turn, its model calls and tool work as usual, no span is kept."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        conversation, _kb = await make_conversation(tenant, member, scripted_llm)
        script_tool_turn(scripted_llm)
        _user, reply, sink = await turn(tenant, conversation, "香菇黄焖鸡多少钱？")
        with tracing.span("anything") as span:
            assert not span.is_recording()
    finally:
        tracing.reset()
    assert str(sink.result.status) == "completed" and reply.content == "香菇黄焖鸡 is 14元."
    calls = await database_sync_to_async(_calls)(tenant, conversation)
    assert len(calls) == 2 and all(call.completion_tokens > 0 for call in calls)
    assert exporter.get_finished_spans() == ()


def _rated_reply(tenant, member, conversation, **kwargs):
    with tenant_scope(tenant):
        message = Message.objects.filter(conversation=conversation, role="assistant").last()
        feedback_given.send(sender=Message, message=message, **kwargs)
        return message


async def test_feedback_given_becomes_a_feedback_span(tenant, member, scripted_llm, spans):
    conversation, _kb = await make_conversation(tenant, member, scripted_llm)
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Hello."}})
    await turn(tenant, conversation, "Hi")
    turn_spans = {item.context.span_id: item for item in spans.get_finished_spans()}
    (root,) = [item for item in turn_spans.values() if item.parent is None]
    spans.clear()
    message = await database_sync_to_async(_rated_reply)(
        tenant, member, conversation, rating=-1, comment="too short 太短", source="widget"
    )
    (span,) = spans.get_finished_spans()
    # In the rated turn's trace, under the span that stored the reply.
    assert span.name == "feedback" and span.context.trace_id == root.context.trace_id
    assert span.parent is not None and span.parent.span_id in turn_spans
    assert message.trace_parent.split("-")[1] == format(root.context.trace_id, "032x")
    assert dict(span.attributes) == {
        "agentplat.feedback.rating": -1,
        "agentplat.feedback.source": "widget",
        "agentplat.feedback.has_comment": True,
        "agentplat.message.id": message.pk,
        "gen_ai.conversation.id": str(conversation.pk),
        "agentplat.tenant.id": str(tenant.pk),
        "gen_ai.agent.id": str(conversation.agent_id),
        "user.id": str(member.pk),
    }
    (event,) = span.events
    assert event.name == "gen_ai.evaluation.result"
    assert dict(event.attributes)["gen_ai.evaluation.score.value"] == -1.0


async def test_feedback_on_a_reply_stored_with_traces_off_is_a_trace_of_its_own(tenant, member, scripted_llm):
    conversation, _kb = await make_conversation(tenant, member, scripted_llm)
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Hello."}})
    await turn(tenant, conversation, "Hi")  # traces off (the default): nothing to join later
    exporter = _exporter(capture=False)
    try:
        message = await database_sync_to_async(_rated_reply)(tenant, member, conversation, rating=1, source="api")
    finally:
        tracing.reset()
    assert message.trace_parent == ""
    (span,) = exporter.get_finished_spans()
    assert span.name == "feedback" and span.parent is None


async def test_a_feedback_comment_is_recorded_only_with_the_setting(tenant, member, scripted_llm, spans_with_text):
    conversation, _kb = await make_conversation(tenant, member, scripted_llm)
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Hello."}})
    await turn(tenant, conversation, "Hi")
    spans_with_text.clear()
    await database_sync_to_async(_rated_reply)(tenant, member, conversation, rating=1, comment="好", source="chat")
    (span,) = spans_with_text.get_finished_spans()
    assert span.attributes["agentplat.feedback.comment"] == "好" and span.attributes["agentplat.feedback.rating"] == 1


def test_a_trace_is_carried_to_a_thread_that_does_not_copy_the_context(spans):
    seen = {}
    with tracing.span("parent") as parent:
        headers = tracing.carrier()

    def worker():
        with tracing.resumed(headers), tracing.span("child") as child:
            seen["child"] = child

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    child = seen["child"]
    assert child.parent.span_id == parent.get_span_context().span_id
    assert child.get_span_context().trace_id == parent.get_span_context().trace_id
    assert "traceparent" in headers


def test_a_failure_marks_the_span_with_the_exception_type_only(spans):
    with pytest.raises(ValueError), tracing.span("failing"):
        raise ValueError("the prompt said " + SECRET_KEY)
    (span,) = spans.get_finished_spans()
    assert span.status.is_ok is False and span.attributes["error.type"] == "ValueError"
    assert not span.events and SECRET_KEY not in _all_text([span])


async def test_memory_extraction_on_its_background_thread_joins_the_turns_trace(
    tenant, member, scripted_llm, settings, spans
):
    event = {"event_id": "n1", "actor": "user", "action_type": "report", "content_summary": "Port A is closed"}
    scripted_llm.set_rules(
        {
            "when": {"system_prompt": {"contains": "event graph"}},
            "reply": {"text": json.dumps({"new_events": [event]})},
        },
        {"when": {}, "reply": {"text": "Noted."}},
    )
    conversation, _kb = await make_conversation(tenant, member, scripted_llm, extraction="model")
    settings.MEMORY_EXTRACT_IN_THREAD = True
    await turn(tenant, conversation, "Port A is closed by a typhoon.")
    assert await asyncio.to_thread(extract_line.wait)

    finished = spans.get_finished_spans()
    (root,) = [span for span in finished if span.name == "invoke_agent Waiter"]
    extraction = [span for span in finished if span.attributes.get("agentplat.llm.purpose") == "extract"]
    assert extraction, [span.name for span in finished]
    for span in extraction:
        assert span.context.trace_id == root.context.trace_id
        assert span.parent.span_id == root.context.span_id
        assert span.attributes["gen_ai.conversation.id"] == str(conversation.pk)  # the turn's identity, carried


def test_a_celery_task_continues_the_trace_of_whoever_queued_it(spans):
    headers: dict = {}
    with tracing.span("queueing") as parent:
        before_task_publish.send(sender="memory.extract_turn_memory", headers=headers, body=())
    assert headers["traceparent"].split("-")[2] == format(parent.get_span_context().span_id, "016x")

    task = celery_app.tasks["memory.extract_turn_memory"]
    task.push_request(id="t-1", **headers)
    try:
        task_prerun.send(sender=task, task_id="t-1", task=task, args=(), kwargs={})
        with tracing.span("in the task") as child:
            pass
        task_postrun.send(sender=task, task_id="t-1", task=task, args=(), kwargs={}, retval=None, state="SUCCESS")
    finally:
        task.pop_request()
    assert child.parent.span_id == parent.get_span_context().span_id
    with tracing.span("after the task") as after:
        pass
    assert after.parent is None  # the task's context was left when it ended
