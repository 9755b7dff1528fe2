"""The gateway driven through the real openai SDK against the scripted server."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.db import database_sync_to_async as sync_to_async
from llm import errors
from llm.client import (
    Finished,
    TextDelta,
    ToolCallsReady,
    ToolCallStarted,
    complete_chat,
    embed_texts,
    stream_chat,
)
from llm.errors import LLMError
from llm.messages import ChatMessage
from llm.models import CallStatus, LLMCall, UsageSource
from llm.options import ChatRequest
from llm.services import provider_ensure_demo
from llm.tokens import count_messages, count_text
from tenants.scope import tenant_scope
from tests.llm.factories import LLMCallFactory
from tests.turns import flush_records

pytestmark = pytest.mark.django_db(transaction=True)

USER = [ChatMessage.user("hello there")]
USER_WIRE = [{"role": "user", "content": "hello there"}]  # what the provider receives
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}},
    },
]


async def collect(request, **kwargs):
    events = []
    async for event in stream_chat(request, **kwargs):
        events.append(event)
    return events


async def calls_of(tenant):
    await flush_records()
    return await _calls_of(tenant)


@sync_to_async
def _calls_of(tenant):
    with tenant_scope(tenant):
        return list(LLMCall.objects.order_by("pk"))


async def test_streamed_text_arrives_in_order(tenant, provider, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "one two three 四 五 六 seven", "chunk_size": 4}})
    events = await collect(ChatRequest(messages=USER), tenant=tenant, provider=provider)

    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == ["one ", "two ", "thre", "e 四 ", "五 六 ", "seve", "n"]
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.text == "one two three 四 五 六 seven"
    assert finished.finish_reason == "stop"
    sent = scripted_llm.requests()
    assert len(sent) == 1
    assert sent[0]["body"]["stream"] is True and sent[0]["body"]["stream_options"] == {"include_usage": True}
    assert sent[0]["authorization"] == "Bearer sk-test-SECRET-0123456789abcdef"


async def test_the_request_body_is_the_chat_parameters_as_they_are(tenant, provider, scripted_llm):
    """The parameters reach the SDK already in wire format (in `extra_body`, past its typed pass): the body the
    server reads is the messages, the settings and a caller's extra fields at the top level, nothing nested."""
    scripted_llm.set_rules({"when": {}, "reply": {"text": "ok"}})
    await collect(
        ChatRequest(messages=USER, temperature=0.2, max_tokens=50, extra_body={"top_k": 5}),
        tenant=tenant,
        provider=provider,
    )
    body = scripted_llm.requests()[0]["body"]
    assert body["messages"] == USER_WIRE and body["model"] == provider.default_chat_model
    assert (body["temperature"], body["max_tokens"], body["top_k"]) == (0.2, 50, 5)
    assert "extra_body" not in body and body["stream"] is True


async def test_one_tool_call_assembled(tenant, provider, scripted_llm):
    scripted_llm.set_rules(
        {
            "when": {"has_tools": True},
            "reply": {"tool_calls": [{"id": "call_w1", "name": "get_weather", "arguments": {"city": "上海 Shanghai"}}]},
        }
    )
    events = await collect(ChatRequest(messages=USER, tools=TOOLS), tenant=tenant, provider=provider)

    started = [e for e in events if isinstance(e, ToolCallStarted)]
    assert [(s.id, s.name) for s in started] == [("call_w1", "get_weather")]
    ready = next(e for e in events if isinstance(e, ToolCallsReady))
    (call,) = ready.tool_calls
    assert (call.id, call.name, call.parsed_arguments) == ("call_w1", "get_weather", {"city": "上海 Shanghai"})
    assert events[-1].finish_reason == "tool_calls"
    assert scripted_llm.requests()[0]["body"]["tools"] == TOOLS


@pytest.mark.parametrize("interleave", [False, True])
async def test_two_parallel_tool_calls_assembled(tenant, provider, scripted_llm, interleave):
    scripted_llm.set_rules(
        {
            "when": {},
            "reply": {
                "interleave_tool_calls": interleave,
                "tool_calls": [
                    {"id": "call_a", "name": "get_weather", "arguments": {"city": "Paris, the capital of France"}},
                    {"id": "call_b", "name": "get_time", "arguments": {"tz": "Asia/Shanghai"}},
                ],
            },
        }
    )
    result = await complete_chat(ChatRequest(messages=USER, tools=TOOLS), tenant=tenant, provider=provider)

    assert [(c.index, c.id, c.name, c.parsed_arguments) for c in result.tool_calls] == [
        (0, "call_a", "get_weather", {"city": "Paris, the capital of France"}),
        (1, "call_b", "get_time", {"tz": "Asia/Shanghai"}),
    ]
    assert result.finish_reason == "tool_calls"
    assert result.tool_calls[0].as_message_part()["function"]["arguments"] == '{"city": "Paris, the capital of France"}'


async def test_malformed_tool_json_is_delivered_with_its_error(tenant, provider, scripted_llm):
    scripted_llm.set_rules(
        {
            "when": {},
            "reply": {
                "malformed_tool_json": True,
                "tool_calls": [{"name": "get_weather", "arguments": {"city": "Rome"}}],
            },
        }
    )
    result = await complete_chat(ChatRequest(messages=USER, tools=TOOLS), tenant=tenant, provider=provider)

    (call,) = result.tool_calls
    assert call.parsed_arguments is None
    assert "Invalid JSON" in call.arguments_error
    assert call.arguments.startswith('{"city": "Rome"')


async def test_usage_reported_by_the_server_is_recorded(tenant, provider, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Fine, thanks."}})
    result = await complete_chat(
        ChatRequest(messages=USER), tenant=tenant, provider=provider, purpose="summary", agent_id=7, conversation_id=11
    )

    (call,) = await calls_of(tenant)
    assert call.pk == result.call_id
    assert (call.prompt_tokens, call.completion_tokens, call.total_tokens) == (
        result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens,
    )  # fmt: skip
    # The scripted server counts like OpenAI does: the cookbook's chat overhead plus the text.
    assert (call.prompt_tokens, call.completion_tokens) == (count_messages(USER_WIRE), count_text("Fine, thanks."))
    assert call.usage_source == UsageSource.PROVIDER
    assert (call.status, call.error_code, call.purpose, call.model) == (CallStatus.OK, "", "summary", "gpt-4")
    assert (call.agent_id, call.conversation_id, call.provider_id, call.tenant_id) == (7, 11, provider.pk, tenant.pk)
    assert call.ttft_ms is not None and call.duration_ms >= call.ttft_ms
    assert call.finish_reason == "stop"


async def test_usage_is_counted_when_the_server_sends_none(tenant, provider, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Fine, thanks.", "usage": False}})
    result = await complete_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider)

    (call,) = await calls_of(tenant)
    assert call.usage_source == UsageSource.COUNTED
    assert (call.prompt_tokens, call.completion_tokens) == (count_messages(USER_WIRE), count_text("Fine, thanks."))
    assert result.usage.source == UsageSource.COUNTED


async def test_rate_limit_then_success_is_retried(tenant, provider, scripted_llm):
    scripted_llm.set_rules(
        {"when": {}, "times": 1, "reply": {"error": {"status": 429, "retry_after": 0.01, "message": "slow down"}}},
        {"when": {}, "reply": {"text": "made it"}},
    )
    result = await complete_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider)

    assert result.text == "made it"
    assert len(scripted_llm.requests()) == 2
    (call,) = await calls_of(tenant)
    assert (call.status, call.attempts) == (CallStatus.OK, 2)


async def test_server_error_three_times_gives_up_quickly(tenant, provider, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"error": {"status": 500}}})
    started = time.monotonic()
    with pytest.raises(LLMError) as caught:
        await asyncio.wait_for(complete_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider), timeout=10)

    assert caught.value.code == errors.PROVIDER_ERROR
    assert time.monotonic() - started < 3
    assert len(scripted_llm.requests()) == 3  # the first try and max_retries=2
    (call,) = await calls_of(tenant)
    assert (call.status, call.error_code, call.attempts) == (CallStatus.ERROR, "provider_error", 3)


async def test_timeout_gives_its_code_within_the_configured_time(tenant, provider, scripted_llm):
    provider.timeout_seconds = 0.5
    scripted_llm.set_rules({"when": {}, "reply": {"text": "too late", "stall": 5}})
    started = time.monotonic()
    with pytest.raises(LLMError) as caught:
        await complete_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider)

    elapsed = time.monotonic() - started
    assert caught.value.code == errors.PROVIDER_TIMEOUT
    assert 0.4 < elapsed < 1.5  # timeouts are not retried: the caller waits the configured time, once
    (call,) = await calls_of(tenant)
    assert call.error_code == "provider_timeout"


async def test_stall_mid_stream_times_out_with_partial_text(tenant, provider, scripted_llm):
    provider.timeout_seconds = 0.3
    scripted_llm.set_rules({"when": {}, "reply": {"text": "abcdefgh", "chunk_size": 2, "delay": 2, "first_delay": 0}})
    received = []
    with pytest.raises(LLMError) as caught:
        async for event in stream_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider):
            received.append(event.text)
    assert caught.value.code == errors.PROVIDER_TIMEOUT
    assert received == ["ab"] and caught.value.partial_text == "ab"


async def test_dropped_stream_raises_and_keeps_the_partial_text(tenant, provider, scripted_llm):
    scripted_llm.set_rules(
        {"when": {}, "reply": {"text": "alpha beta gamma delta epsilon", "chunk_size": 6, "drop_after": 3}}
    )
    received = []
    with pytest.raises(LLMError) as caught:
        async for event in stream_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider):
            if isinstance(event, TextDelta):
                received.append(event.text)

    assert caught.value.code == errors.STREAM_DROPPED
    assert received == ["alpha ", "beta g"]  # the role chunk, then two pieces, then the connection broke
    assert caught.value.partial_text == "alpha beta g"
    assert len(scripted_llm.requests()) == 1  # text had reached the caller: never retried
    (call,) = await calls_of(tenant)
    assert (call.status, call.error_code) == (CallStatus.ERROR, "stream_dropped")
    assert call.completion_tokens > 0  # the partial reply is counted


async def test_quota_exceeded_is_refused_before_sending(tenant, provider, scripted_llm):
    @sync_to_async
    def use_up_budget():
        tenant.monthly_token_budget = 1000
        tenant.save()
        with tenant_scope(tenant):
            LLMCallFactory(tenant=tenant, prompt_tokens=990, completion_tokens=5)

    await use_up_budget()
    with pytest.raises(LLMError) as caught:
        await complete_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider)

    assert caught.value.code == errors.QUOTA_EXCEEDED
    assert "monthly token budget" in caught.value.message  # the active language (English in tests)
    assert "预算" in errors.message_for(caught.value.code, "zh-hans")
    assert scripted_llm.requests("") == []
    calls = await calls_of(tenant)
    assert (calls[-1].status, calls[-1].error_code, calls[-1].total_tokens) == (CallStatus.REFUSED, "quota_exceeded", 0)


async def test_calls_fit_while_under_budget(tenant, provider, scripted_llm):
    @sync_to_async
    def nearly_use_up_budget():
        tenant.monthly_token_budget = 1000
        tenant.save()
        with tenant_scope(tenant):
            LLMCallFactory(tenant=tenant, prompt_tokens=980, completion_tokens=0)  # 20 left; the prompt is 9

    await nearly_use_up_budget()
    result = await complete_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider)
    assert result.text == "You said: hello there"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ({"status": 401, "message": "Incorrect API key provided"}, errors.AUTH_FAILED),
        (
            {"status": 400, "code": "context_length_exceeded", "message": "maximum context length is 8192 tokens"},
            errors.CONTEXT_TOO_LONG,
        ),
        (
            {"status": 429, "code": "insufficient_quota", "message": "You exceeded your current quota"},
            errors.PROVIDER_QUOTA_EXCEEDED,
        ),
    ],
)
async def test_provider_errors_map_to_codes(tenant, provider, scripted_llm, error, code):
    scripted_llm.set_rules({"when": {}, "reply": {"error": error}})
    with pytest.raises(LLMError) as caught:
        await complete_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider)
    assert caught.value.code == code
    assert len(scripted_llm.requests()) == 1  # none of these is retried


async def test_unreachable_provider(tenant, provider):
    provider.base_url = "http://127.0.0.1:9/v1"  # discard port: nothing listens
    with pytest.raises(LLMError) as caught:
        await complete_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider)
    assert caught.value.code == errors.PROVIDER_UNREACHABLE
    (call,) = await calls_of(tenant)
    assert call.attempts == 3


async def test_cancel_event_stops_the_stream(tenant, provider, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "a b c d e f g h", "chunk_size": 2, "delay": 0.01}})
    cancel = asyncio.Event()
    received = []
    with pytest.raises(LLMError) as caught:
        async for event in stream_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider, cancel=cancel):
            received.append(event.text)
            cancel.set()
    assert caught.value.code == errors.CANCELLED
    assert caught.value.partial_text == "a "
    (call,) = await calls_of(tenant)
    assert (call.status, call.error_code) == (CallStatus.CANCELLED, "cancelled")


async def test_cancelling_the_task_records_a_cancelled_call(tenant, provider, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "slow " * 50, "chunk_size": 5, "delay": 0.05}})
    first = asyncio.Event()

    async def consume():
        async for _event in stream_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (call,) = await calls_of(tenant)
    assert call.status == CallStatus.CANCELLED


async def test_caller_stopping_early_still_records(tenant, provider, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "x " * 20, "chunk_size": 2}})
    stream = stream_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider)
    async for _event in stream:
        break
    await stream.aclose()
    (call,) = await calls_of(tenant)
    assert call.status == CallStatus.CANCELLED


async def test_embeddings_are_deterministic_and_recorded(tenant, provider, scripted_llm):
    provider.embedding_model = "text-embedding-3-small"
    first = await embed_texts(tenant=tenant, provider=provider, inputs=["苹果 apple", "banana"])
    second = await embed_texts(tenant=tenant, provider=provider, inputs=["苹果 apple"])
    assert first[0] == second[0] and len(first[0]) == 64 and first[0] != first[1]
    calls = await calls_of(tenant)
    assert [c.purpose for c in calls] == ["embed", "embed"]


async def test_demo_provider_answers_offline_in_process(tenant):
    demo = await sync_to_async(provider_ensure_demo)(tenant=tenant)
    result = await complete_chat(ChatRequest(messages=[ChatMessage.user("你好")]), tenant=tenant, provider=demo)
    assert "演示模型" in result.text
    english = await complete_chat(ChatRequest(messages=[ChatMessage.user("hello")]), tenant=tenant, provider=demo)
    assert "demo model" in english.text
    tool = await complete_chat(
        ChatRequest(messages=[ChatMessage.user("what's the weather?")], tools=TOOLS), tenant=tenant, provider=demo
    )
    assert tool.tool_calls[0].name == "get_weather"  # the tool the message names (its name's word "weather")
    calls = await calls_of(tenant)
    assert [c.status for c in calls] == ["ok", "ok", "ok"]
    assert all(c.usage_source == UsageSource.PROVIDER and c.prompt_tokens > 0 for c in calls)


async def test_budget_is_enforced_across_consecutive_calls_of_one_process(tenant, provider, scripted_llm):
    """The in-process ledger lets clearly-fitting calls skip the database, yet the budget still holds."""

    @sync_to_async
    def small_budget():
        tenant.monthly_token_budget = 60
        tenant.save()

    await small_budget()
    scripted_llm.set_rules({"when": {}, "reply": {"text": "ok ok ok ok ok ok"}})  # 9 prompt + 6 completion tokens
    outcomes = []
    for _ in range(6):
        try:
            await complete_chat(ChatRequest(messages=USER), tenant=tenant, provider=provider)
            outcomes.append("ok")
        except LLMError as exc:
            outcomes.append(exc.code)
    assert outcomes == ["ok", "ok", "ok", "ok", "quota_exceeded", "quota_exceeded"]  # 4 x 15 = 60 tokens
    assert len(scripted_llm.requests()) == 4
