"""Chunking (K2): token-sized chunks cut at Chinese and English sentence ends, whole-sentence overlap, records."""

from __future__ import annotations

import itertools
import re

import pytest

from knowledge.chunking import chunk_sections, chunk_text, split_sentences
from knowledge.parsing import Section
from llm.tokens import count_text

ZH = "光伏组件把太阳光转换成直流电。逆变器把直流电变成交流电！组件朝南安装发电量最高吗？是的；灰尘会降低发电量…"
EN = "Solar panels make direct current. Inverters make it alternating! Do panels face south? Yes; dust hurts."
SENTENCE_END = re.compile(r"[。！？；…!?.;]$")


def _no_space(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_sentences_end_at_chinese_and_english_punctuation_and_line_breaks():
    pieces = split_sentences(ZH + "\n" + EN + "\nlast line")
    assert "".join(pieces) == ZH + "\n" + EN + "\nlast line"
    stripped = [p.strip() for p in pieces]
    assert stripped[:5] == [
        "光伏组件把太阳光转换成直流电。",
        "逆变器把直流电变成交流电！",
        "组件朝南安装发电量最高吗？",
        "是的；",
        "灰尘会降低发电量…",
    ]
    assert stripped[5:] == [
        "Solar panels make direct current.",
        "Inverters make it alternating!",
        "Do panels face south?",
        "Yes;",
        "dust hurts.",
        "last line",
    ]


def test_a_decimal_point_does_not_end_a_sentence():
    assert len(split_sentences("Efficiency is 21.5 percent today. Tomorrow too.")) == 2


@pytest.mark.parametrize("size", [40, 80, 160])  # each sentence alone fits
def test_chunks_fit_the_size_and_end_at_sentence_ends(size):
    text = (ZH + EN) * 6
    chunks = chunk_text(text, chunk_size=size, chunk_overlap=0)
    assert len(chunks) > 1
    assert all(count_text(chunk) <= size for chunk in chunks)
    assert all(SENTENCE_END.search(chunk) for chunk in chunks)
    assert _no_space("".join(chunks)) == _no_space(text)  # nothing lost, nothing repeated without overlap


def test_overlap_repeats_whole_sentences_within_the_budget():
    text = " ".join(f"Sentence number {i} is here." for i in range(30))
    chunks = chunk_text(text, chunk_size=40, chunk_overlap=15)
    for before, after in itertools.pairwise(chunks):
        first_sentence = split_sentences(after)[0].strip()
        assert before.endswith(first_sentence)  # the next chunk starts with the end of this one
        repeated = [s.strip() for s in split_sentences(after) if s.strip() in before]
        assert 0 < count_text(" ".join(repeated)) <= 15
    assert all(count_text(chunk) <= 40 for chunk in chunks)


def test_a_sentence_longer_than_a_chunk_is_cut_at_clauses_then_tokens():
    long_zh = "，".join(["光伏组件把太阳光转换成直流电"] * 12) + "。"
    chunks = chunk_text(long_zh, chunk_size=30, chunk_overlap=0)
    assert len(chunks) > 1 and all(count_text(c) <= 30 for c in chunks)
    assert all(c.endswith(("，", "。")) for c in chunks)
    unbroken = "字" * 200
    pieces = chunk_text(unbroken, chunk_size=25, chunk_overlap=5)
    assert "".join(pieces) == unbroken and all(count_text(p) <= 25 for p in pieces)


def test_records_stay_whole_and_long_records_are_split_with_their_part():
    sections = [
        Section("name: 经典黄焖鸡\nprice: 12元", {"key": "1"}, record=True),
        Section("name: 辣味黄焖鸡\nprice: 13元", {"key": "2"}, record=True),
        Section("description: " + EN * 5, {"key": "3"}, record=True),
    ]
    drafts = chunk_sections(sections, chunk_size=30, chunk_overlap=5)
    assert drafts[0].text == "name: 经典黄焖鸡\nprice: 12元" and drafts[0].metadata == {"key": "1"}
    assert drafts[1].metadata == {"key": "2"}
    long_parts = [d for d in drafts if d.metadata.get("key") == "3"]
    assert len(long_parts) > 1 and [d.metadata["part"] for d in long_parts] == list(range(1, len(long_parts) + 1))
    assert [d.position for d in drafts] == list(range(len(drafts)))
    assert all(d.token_count == count_text(d.text) <= 30 for d in drafts)


def test_chunks_never_span_sections_and_carry_their_metadata():
    sections = [Section("Page one text.", {"page": 1}), Section("Page two text.", {"page": 2}), Section("  ")]
    drafts = chunk_sections(sections, chunk_size=200, chunk_overlap=20)
    assert [(d.text, d.metadata) for d in drafts] == [("Page one text.", {"page": 1}), ("Page two text.", {"page": 2})]
