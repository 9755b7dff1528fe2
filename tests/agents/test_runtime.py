"""The turn runtime with a collector sink: frames, stored messages, one system message, overflow, failures."""

import asyncio

import pytest
from django.db import OperationalError

from agents import runtime
from agents.runtime import run_turn
from agents.services import agent_create, conversation_start
from core.db import database_sync_to_async
from llm.models import LLMCall
from memory.models import Message, MessageStatus
from memory.services import message_add
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from tests.turns import Collector, user_turn

pytestmark = pytest.mark.django_db(transaction=True)

PROMPT = "You advise on solar panels."


async def _turn(tenant, conversation, text, stop=None):
    return await user_turn(tenant, conversation, text, stop=stop, client_id="c-" + text[:20])


@pytest.fixture(autouse=True)
def _fast_retries(settings):
    settings.LLM_RETRY_BASE_DELAY = 0.01
    settings.LLM_RETRY_MAX_DELAY = 0.02


@pytest.fixture
def conversation_factory(tenant, member, scripted_llm):
    def _make(overflow=None, retries=0):
        with tenant_scope(tenant):
            ModelProviderFactory(
                tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True, max_retries=retries
            )
            agent = agent_create(
                tenant=tenant, name="Solar advisor", system_prompt=PROMPT, model="gpt-4",
                token_overflow_config=overflow or {"strategy": "none"},
            )  # fmt: skip
            return conversation_start(agent=agent, user=member)

    return _make


def _add(tenant, conversation, role, content, **kwargs):
    with tenant_scope(tenant):
        return message_add(conversation=conversation, role=role, content=content, **kwargs)


def _rows(tenant, conversation):
    with tenant_scope(tenant):
        return list(Message.objects.filter(conversation=conversation).order_by("id")), list(LLMCall.objects.all())


async def test_a_turn_streams_deltas_and_stores_the_reply_with_usage(tenant, conversation_factory, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Panels face **south**.", "chunk_size": 4}})
    conversation = await database_sync_to_async(conversation_factory)()
    _user, reply, sink = await _turn(tenant, conversation, "Which way?")

    deltas = [frame["content"] for frame in sink.frames if frame["type"] == "delta"]
    assert "".join(deltas) == "Panels face **south**." and len(deltas) > 1
    assert sink.types()[-2:] == ["step", "done"]
    step, done = sink.frames[-2:]
    assert step["agentChatResponse"] == {"content": "Panels face **south**.", "intent": "chat", "data": {}}
    assert done["status"] == "complete" and done["message_id"] == reply.pk and done["index"] == 0
    assert done["usage"]["prompt_tokens"] > 0 and done["usage"]["completion_tokens"] > 0
    assert done["strategy"] == {"name": "none", "triggered": False, "tokens_saved": 0, "summarized": False}

    messages, calls = await database_sync_to_async(_rows)(tenant, conversation)
    assert [(m.role, m.status) for m in messages] == [("user", "complete"), ("assistant", "complete")]
    assert messages[1].content == "Panels face **south**."
    assert messages[1].usage["prompt_tokens"] == done["usage"]["prompt_tokens"]
    (call,) = calls
    assert (call.agent_id, call.conversation_id) == (conversation.agent_id, conversation.pk)
    assert messages[1].usage["llm_call_id"] == call.pk


async def test_exactly_one_system_message_reaches_the_model(tenant, conversation_factory, scripted_llm):
    conversation = await database_sync_to_async(conversation_factory)()
    await database_sync_to_async(_add)(tenant, conversation, "system", "Runtime note: the user is in Hangzhou.")
    await _turn(tenant, conversation, "hello")
    (request,) = await asyncio.to_thread(scripted_llm.requests)
    messages = request["body"]["messages"]
    assert [m["role"] for m in messages].count("system") == 1 and messages[0]["role"] == "system"
    assert PROMPT in messages[0]["content"] and "Hangzhou" in messages[0]["content"]
    assert messages[-1] == {"role": "user", "content": "hello"}


async def test_the_user_message_is_stored_before_the_model_is_called(tenant, conversation_factory, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"error": {"status": 500}}})
    conversation = await database_sync_to_async(conversation_factory)(retries=1)
    user, reply, sink = await _turn(tenant, conversation, "are you there?")

    assert len(await asyncio.to_thread(scripted_llm.requests)) == 2  # the first try and one retry
    assert sink.types() == ["error"]
    error = sink.frames[0]
    assert error["code"] == "provider_error" and error["message_id"] is None
    assert error["user_message_id"] == user.pk and error["message"]
    messages, _calls = await database_sync_to_async(_rows)(tenant, conversation)
    assert [(m.role, m.content, m.status) for m in messages] == [
        ("user", "are you there?", "complete"),
        ("assistant", "", "error"),
    ]
    assert messages[1].error_code == "provider_error" and reply.pk == messages[1].pk


async def test_a_dropped_stream_keeps_the_partial_reply(tenant, conversation_factory, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "one two three four five six", "drop_after": 3}})
    conversation = await database_sync_to_async(conversation_factory)()
    _user, reply, sink = await _turn(tenant, conversation, "count")

    assert sink.types()[-2:] == ["done", "error"]
    done, error = sink.frames[-2:]
    assert done["status"] == "partial" and done["message_id"] == reply.pk
    assert error["code"] == "stream_dropped" and error["message_id"] == reply.pk
    assert reply.status == MessageStatus.PARTIAL and reply.error_code == "stream_dropped"
    assert reply.content and "one two three four five six".startswith(reply.content)


async def test_stop_ends_the_reply_as_partial_with_code_cancelled(tenant, conversation_factory, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 200, "delay": 0.01}})
    conversation = await database_sync_to_async(conversation_factory)()
    stop = asyncio.Event()

    class StopAfterThree(Collector):
        async def emit(self, frame):
            frame = await super().emit(frame)
            if len(self.frames) == 3:
                stop.set()
            return frame

    user = await database_sync_to_async(_add)(tenant, conversation, "user", "talk", client_id="c-stop")
    sink = StopAfterThree()
    with tenant_scope(tenant):
        result = await run_turn(conversation=conversation, user_message=user, sink=sink, stop=stop)
    reply = result.message
    assert result.status == "stopped" and result.error_code == "cancelled"
    assert reply.status == MessageStatus.PARTIAL and reply.error_code == "cancelled"
    assert sink.types()[-1] == "error" and sink.frames[-1]["code"] == "cancelled"
    assert sink.types().count("delta") < 10


async def test_the_conversation_overflow_strategy_is_applied(tenant, conversation_factory, scripted_llm):
    conversation = await database_sync_to_async(conversation_factory)(
        {"strategy": "sliding_window", "max_tokens": 300, "reserve_ratio": 0.1}
    )

    def history():
        for number in range(12):
            _add(tenant, conversation, "user", f"question {number} " + "words " * 20)
            _add(tenant, conversation, "assistant", f"answer {number} " + "words " * 20)

    await database_sync_to_async(history)()
    _user, _reply, sink = await _turn(tenant, conversation, "latest question")

    (request,) = await asyncio.to_thread(scripted_llm.requests)
    sent = request["body"]["messages"]
    assert sent[-1]["content"] == "latest question"
    assert len(sent) < 1 + 24 + 1  # older messages left out by the window
    assert not any("question 0 " in str(m["content"]) for m in sent)
    strategy = sink.frames[-1]["strategy"]
    assert strategy["name"] == "sliding_window" and strategy["triggered"] and strategy["tokens_saved"] > 0


async def _dropping(times: int, conversation_factory, scripted_llm, monkeypatch):
    """A conversation whose reply is cut (the turn fails) on a database that dropped its connections: the first
    `times` writes of the failed reply raise what Django raises then (a pooled connection the server closed fails at
    its first statement, nothing done). (the conversation, the failed reply's write attempts)"""
    scripted_llm.set_rules({"when": {}, "reply": {"text": "one two three four five six", "drop_after": 3}})
    conversation = await database_sync_to_async(conversation_factory)()
    store = runtime.assistant_message_finish
    calls = []

    def finish(**kwargs):
        calls.append(kwargs["error_code"])
        if len(calls) <= times:
            raise OperationalError("terminating connection due to administrator command")
        return store(**kwargs)

    monkeypatch.setattr(runtime, "assistant_message_finish", finish)
    return conversation, calls


async def test_a_failed_reply_whose_write_meets_a_dropped_connection_is_written_again(
    tenant, conversation_factory, scripted_llm, monkeypatch
):
    conversation, calls = await _dropping(1, conversation_factory, scripted_llm, monkeypatch)
    _user, reply, sink = await _turn(tenant, conversation, "count")
    assert calls == ["stream_dropped", "stream_dropped"]
    assert sink.types()[-2:] == ["done", "error"] and reply.status == MessageStatus.PARTIAL


async def test_with_the_database_gone_the_page_still_gets_the_turns_error_frame(
    tenant, conversation_factory, scripted_llm, monkeypatch
):
    conversation, _calls = await _dropping(10, conversation_factory, scripted_llm, monkeypatch)
    user = await database_sync_to_async(_add)(tenant, conversation, "user", "count")
    sink = Collector()
    with tenant_scope(tenant), pytest.raises(OperationalError):
        await run_turn(conversation=conversation, user_message=user, sink=sink)
    assert sink.types()[-1] == "error"
    error = sink.frames[-1]
    assert error["code"] == "stream_dropped" and error["message"] and error["user_message_id"] == user.pk
    stored = await database_sync_to_async(_rows)(tenant, conversation)
    assert [message.content for message in stored[0]] == ["count"]  # the user's message stays
