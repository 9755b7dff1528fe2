"""Which local model embeds long-term memory (MEMORY_EMBEDDER): by default ("auto") each text by the model for its
language, so Chinese memories are recalled by meaning (multilingual e5) while English ones keep the English model;
`reembed_memory` and migration 0018 move rows stored by another model."""

from __future__ import annotations

import datetime as dt
import importlib
from io import StringIO

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from knowledge.embedders import local_embedder
from knowledge.keyword import terms_for
from memory.longterm import store
from memory.longterm.strength import Owner, recall, remember
from memory.models import MemoryItem

T0 = dt.datetime(2026, 1, 1, 9, 0, tzinfo=dt.UTC)
MEMORIES = ["用户对花生过敏，点餐时要避开。", "用户下个月要去成都出差三天。", "用户的女儿在学钢琴，每周六上课。"]
QUESTION = "这位顾客吃东西有什么忌口？"  # the first memory, in other words
ENGLISH = ["The user drives a blue Tesla to work.", "The user adopted a rescue greyhound.", "Her son studies law."]
ENGLISH_QUESTION = "What kind of car does this person have?"  # the first, in other words
E5 = local_embedder("local_multilingual").signature()
MINILM = local_embedder("local").signature()


def test_the_default_embeds_each_text_by_the_model_for_its_language(member, in_tenant):
    owner = Owner(user_id=member.pk, key="auto_1")
    chinese = [remember(owner, text, now=T0) for text in MEMORIES]
    english = [remember(owner, text, now=T0) for text in ENGLISH]
    mixed = remember(owner, "我下周用 Python 写一个 web 服务", now=T0)
    assert {item.embedder for item in chinese} == {E5}
    assert {item.embedder for item in english} == {MINILM}
    assert mixed.embedder == E5  # a Chinese sentence with a few English words is read by the multilingual model
    assert not set(terms_for(QUESTION)) & set(terms_for(MEMORIES[0]))  # no keyword to go by
    assert not set(terms_for(ENGLISH_QUESTION)) & set(terms_for(ENGLISH[0]))
    assert [item.text for item in recall(owner, QUESTION, now=T0, top_n=1).returned] == [MEMORIES[0]]
    assert [item.text for item in recall(owner, ENGLISH_QUESTION, now=T0, top_n=1).returned] == [ENGLISH[0]]


def test_an_english_question_finds_a_chinese_memory_through_the_multilingual_model(member, in_tenant):
    owner = Owner(user_id=member.pk, key="auto_2")
    for text in MEMORIES:
        remember(owner, text, now=T0)
    assert [item.text for item in recall(owner, "Is the customer allergic to anything?", now=T0, top_n=1).returned] == [
        MEMORIES[0]
    ]


def test_a_chinese_memory_is_recalled_by_meaning_on_the_multilingual_model(settings, member, in_tenant):
    settings.MEMORY_EMBEDDER = "local_multilingual"
    assert [model.kind for model in store.embedders()] == ["local_multilingual"]
    owner = Owner(user_id=member.pk, key="e5_1")
    items = [remember(owner, text, now=T0) for text in [*MEMORIES, *ENGLISH]]
    assert {item.embedder for item in items} == {E5}
    result = recall(owner, QUESTION, now=T0, top_n=1)
    assert [item.text for item in result.returned] == [MEMORIES[0]]


def test_an_unknown_setting_is_refused_with_the_choices(settings):
    settings.MEMORY_EMBEDDER = "minilm"
    with pytest.raises(ImproperlyConfigured, match="auto, local, local_multilingual"):
        store.embedders()


def test_reembed_memory_moves_the_rows_of_the_other_model(settings, member, in_tenant):
    settings.MEMORY_EMBEDDER = "local"
    owner = Owner(user_id=member.pk, key="e5_2")
    items = [remember(owner, text, now=T0) for text in MEMORIES]
    assert {item.embedder for item in items} == {MINILM}
    settings.MEMORY_EMBEDDER = "local_multilingual"
    out = StringIO()
    call_command("reembed_memory", "--dry-run", stdout=out)
    assert "3 rows outdated" in out.getvalue()
    call_command("reembed_memory", stdout=StringIO())
    for item in items:
        item.refresh_from_db()
        assert item.embedder == E5 and item.embedding is not None
    assert [item.text for item in recall(owner, QUESTION, now=T0, top_n=1).returned] == [MEMORIES[0]]


def test_the_migration_moves_only_the_rows_whose_language_changes_model(settings, member, in_tenant):
    """An upgrade from the English-only default: migrate re-embeds the Chinese rows with e5 and leaves English
    rows (already the English model's) as they are."""
    settings.MEMORY_EMBEDDER = "local"
    owner = Owner(user_id=member.pk, key="upgrade")
    chinese = [remember(owner, text, now=T0) for text in MEMORIES]
    english = [remember(owner, text, now=T0) for text in ENGLISH]
    before = {item.pk: list(item.embedding) for item in english}
    settings.MEMORY_EMBEDDER = "auto"
    migration = importlib.import_module("memory.migrations.0018_memory_multilingual")
    migration.reembed_rows(apps, None)
    assert {row.embedder for row in MemoryItem.objects.filter(pk__in=[i.pk for i in chinese])} == {E5}
    for row in MemoryItem.objects.filter(pk__in=before):
        assert row.embedder == MINILM and list(row.embedding) == before[row.pk]
    out = StringIO()
    call_command("reembed_memory", "--dry-run", stdout=out)
    assert "0 rows outdated" in out.getvalue()
    assert [item.text for item in recall(owner, QUESTION, now=T0, top_n=1).returned] == [MEMORIES[0]]
