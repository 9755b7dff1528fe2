"""Long-term memory on the local multilingual model (MEMORY_EMBEDDER=local_multilingual): Chinese memories are
recalled by meaning."""

from __future__ import annotations

import datetime as dt

from knowledge.keyword import terms_for
from memory.longterm import store
from memory.longterm.strength import Owner, recall, remember

T0 = dt.datetime(2026, 1, 1, 9, 0, tzinfo=dt.UTC)
MEMORIES = ["用户对花生过敏，点餐时要避开。", "用户下个月要去成都出差三天。", "用户的女儿在学钢琴，每周六上课。"]
QUESTION = "这位顾客吃东西有什么忌口？"  # the first memory, in other words


def test_a_chinese_memory_is_recalled_by_meaning_on_the_multilingual_model(settings, member, in_tenant):
    settings.MEMORY_EMBEDDER = "local_multilingual"
    assert store.embedder().kind == "local_multilingual"
    owner = Owner(user_id=member.pk, key="e5_1")
    items = [remember(owner, text, now=T0) for text in MEMORIES]
    assert not set(terms_for(QUESTION)) & set(terms_for(MEMORIES[0]))  # no keyword to go by
    assert {item.embedder for item in items} == {store.embedder().signature()}
    result = recall(owner, QUESTION, now=T0, top_n=1)
    assert [item.text for item in result.returned] == [MEMORIES[0]]


def test_reembed_memory_moves_the_rows_of_the_other_model(settings, member, in_tenant):
    from io import StringIO

    from django.core.management import call_command

    owner = Owner(user_id=member.pk, key="e5_2")
    items = [remember(owner, text, now=T0) for text in MEMORIES]  # the default model: English MiniLM
    settings.MEMORY_EMBEDDER = "local_multilingual"
    out = StringIO()
    call_command("reembed_memory", "--dry-run", stdout=out)
    assert "3 rows outdated" in out.getvalue()
    call_command("reembed_memory", stdout=StringIO())
    signature = store.embedder().signature()
    for item in items:
        item.refresh_from_db()
        assert item.embedder == signature and item.embedding is not None
    assert [item.text for item in recall(owner, QUESTION, now=T0, top_n=1).returned] == [MEMORIES[0]]
