"""Issue 36: what a reply shows again after a reload. A reply cut by the agent's longest reply ends with `done`
carrying finish_reason "length", keeps it, and the chat page and the widget note it under the reply; a workflow
agent's step lines are kept with its reply and shown again, by their labels. The real openai SDK against the
scripted model server on 127.0.0.1."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from agents.services import agent_create, agent_publish, conversation_start
from agents.workflows.services import workflow_save
from chat.selectors import chat_history
from core.db import database_sync_to_async
from memory.services import assistant_message_finish
from tenants.scope import tenant_scope
from tests.agents.factories import THINKER_WORKFLOW
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn
from tests.widget.helpers import make_embed, new_visitor, open_chat, page_json, visitor_conversation_start

CUT_EN = "This reply was cut off here: it reached the agent’s “Longest reply (tokens)” limit."
CUT_ZH = "回复在此处被截断：已达到智能体的“单次回复最多 Token 数”上限。"


def _conversation(tenant, member, scripted_llm, **fields):
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True)
        workflow = fields.pop("workflow", None)
        agent = agent_create(tenant=tenant, name="Talker", system_prompt="Talk.", model="gpt-4", **fields)
        if workflow:
            workflow_save(tenant=tenant, yaml_text=workflow, agent=agent)
        agent_publish(agent=agent, user=None)
        return conversation_start(agent=agent, user=member)


def _page(client, conversation, language: str) -> str:
    url = reverse("chat:conversation", args=[conversation.pk])
    return client.get(url, HTTP_ACCEPT_LANGUAGE=language).content.decode()


@pytest.mark.django_db(transaction=True)
async def test_a_reply_cut_by_the_longest_reply_is_noted_live_and_after_a_reload(tenant, member, scripted_llm, login):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 60}})
    conversation = await database_sync_to_async(_conversation)(tenant, member, scripted_llm, max_reply_tokens=7)
    _user, reply, sink = await user_turn(tenant, conversation, "Talk a lot.")

    (done,) = sink.of("done")
    assert done["finish_reason"] == "length" and sink.result.finish_reason == "length"
    assert reply.usage["finish_reason"] == "length"

    client = await database_sync_to_async(login)(member, tenant)
    chinese = await database_sync_to_async(_page)(client, conversation, "zh-hans")
    english = await database_sync_to_async(_page)(client, conversation, "en")
    assert f'<p class="chat-cut-note" role="note">{CUT_ZH}</p>' in chinese
    assert CUT_EN in english.replace("&#x27;", "’").replace("'", "’")
    labels = re.search(r'<script id="chat-labels" type="application/json">(.*?)</script>', chinese).group(1)
    assert "cutShort" in labels  # static/js/chat.js notes it live from the done frame


@pytest.mark.django_db(transaction=True)
async def test_a_reply_within_the_longest_reply_has_no_note(tenant, member, scripted_llm, login):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Fine."}})
    conversation = await database_sync_to_async(_conversation)(tenant, member, scripted_llm, max_reply_tokens=50)
    _user, reply, sink = await user_turn(tenant, conversation, "Talk a little.")

    (done,) = sink.of("done")
    assert "finish_reason" not in done and "finish_reason" not in reply.usage
    client = await database_sync_to_async(login)(member, tenant)
    assert "chat-cut-note" not in await database_sync_to_async(_page)(client, conversation, "zh-hans")


@pytest.mark.django_db(transaction=True)
async def test_a_workflow_agents_step_lines_are_kept_and_shown_after_a_reload(tenant, member, scripted_llm, login):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Rain is wet."}})
    conversation = await database_sync_to_async(_conversation)(
        tenant, member, scripted_llm, kind="workflow", workflow=THINKER_WORKFLOW
    )
    _user, reply, sink = await user_turn(tenant, conversation, "rain")

    live = [(frame["name"], frame["status"]) for frame in sink.of("tool") if frame["status"] != "started"]
    assert live == [("ask", "completed"), ("think", "completed"), ("out", "completed")]
    assert [(line["name"], line["status"], line["step_type"]) for line in reply.usage["steps"]] == [
        ("ask", "completed", "input"),
        ("think", "completed", "llm"),
        ("out", "completed", "output"),
    ]

    def history_lines():
        with tenant_scope(tenant):
            (item,) = [item for item in chat_history(conversation=conversation).items if item.role == "assistant"]
            return [line.text for line in item.tools]

    client = await database_sync_to_async(login)(member, tenant)
    chinese = await database_sync_to_async(_page)(client, conversation, "zh-hans")
    lines = re.findall(r'<li class="chat-tool"[^>]*>(.*?)</li>', chinese)
    assert lines == ["步骤「读取输入」已完成", "步骤「调用模型」已完成", "步骤「输出」已完成"]
    assert len(await database_sync_to_async(history_lines)()) == 3
    english = await database_sync_to_async(_page)(client, conversation, "en")
    assert re.findall(r'<li class="chat-tool"[^>]*>(.*?)</li>', english) == [
        "Step “Read input” finished",
        "Step “Ask the model” finished",
        "Step “Output” finished",
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(("language", "note"), [("zh-hans", CUT_ZH), ("en", CUT_EN)])
def test_the_widget_notes_a_cut_reply_after_a_reload_too(client, tenant, scripted_llm, language, note):
    embed = make_embed(tenant, scripted_llm.base_url)
    visitor = new_visitor()
    conversation = visitor_conversation_start(embed, visitor, "Tell me everything.")
    with tenant_scope(tenant):
        usage = {"prompt_tokens": 9, "completion_tokens": 7, "finish_reason": "length"}
        assistant_message_finish(conversation=conversation, content="It all began", usage=usage)
        assistant_message_finish(conversation=conversation, content="Done.", usage={"prompt_tokens": 1})
    chat = open_chat(client, embed, visitor, lang=language)
    page = chat.response.content.decode().replace("&#x27;", "’").replace("'", "’")
    assert page.count(f'<p class="chat-cut-note" role="note">{note}</p>') == 1  # the cut reply only
    assert "cutShort" in page_json(chat.response, "chat-labels")  # and live, from the done frame
