"""Keyword terms and BM25 (K5): jieba segmentation for Chinese, words for English, BM25 ranking."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.keyword import BM25Index, CollectionStats, index_terms, latin_share, stem, terms_for


def test_chinese_is_segmented_into_words_and_their_parts():
    terms = terms_for("人工智能正在改变医疗行业")
    assert {"人工智能", "人工", "智能", "医疗", "行业"} <= set(terms)
    assert "人工智能正在改变医疗行业" not in terms  # not one opaque token


def test_english_words_are_lower_cased_and_punctuation_dropped():
    assert terms_for("The Eiffel Tower, in PARIS!") == ["the", "eiffel", "tower", "in", "paris"]
    assert terms_for("GPT-4 costs $20") == ["gpt", "4", "costs", "20"]


def test_mixed_text_keeps_both():
    terms = terms_for("用 Python 写机器学习")
    assert "python" in terms and {"机器", "学习"} <= set(terms)


@pytest.mark.parametrize(
    ("word", "expected"),
    [("cities", "city"), ("plants", "plant"), ("boxes", "boxe"), ("glass", "glass"), ("virus", "virus"), ("is", "is")],
)
def test_minimal_stemmer_folds_plurals_only(word, expected):
    assert stem(word) == expected


def test_index_terms_drop_stop_words_and_possessives():
    assert index_terms(["the", "king's", "cities", "的", "长城"]) == ["king", "city", "长城"]


def test_latin_share():
    assert latin_share("hello") == 1.0
    assert latin_share("你好") == 0.0
    assert latin_share("123 ?") == 1.0
    assert latin_share("ab你好") == 0.5


def _index(texts: list[str]) -> BM25Index:
    return BM25Index(list(range(1, len(texts) + 1)), [" ".join(terms_for(t)) for t in texts])


def test_bm25_finds_a_chunk_by_a_segmented_chinese_word():
    index = _index(["长城是古代的防御工程。", "人工智能正在改变医疗行业。", "高铁连接北京和上海。"])
    hits = index.search("智能", 3)
    assert hits.ids.tolist() == [2]
    assert hits.scores[0] > 0


def test_bm25_prefers_rare_terms_and_higher_term_frequency():
    index = _index(
        [
            "apple banana",
            "apple apple apple cherry",
            "apple durian",
            "apple",
        ]
    )
    assert index.search("durian apple", 4).ids[0] == 3  # the rare term decides
    scores = index.scores("apple")
    assert scores[1] > scores[0]  # more occurrences, more score (saturating)
    assert index.search("mango", 4).ids.tolist() == []  # no term in common: no hit


def test_shared_collection_stats_make_scores_comparable_across_indexes():
    small = _index(["sourdough loaf"])
    big = _index(["sourdough starter"] + [f"filler text number {i}" for i in range(20)])
    stats = CollectionStats.of([small, big], "sourdough")
    assert stats.count == 22 and stats.frequencies == {"sourdough": 2}
    # Alone, the one-chunk index gives "sourdough" almost no idf; shared stats give both chunks the same.
    assert small.scores("sourdough")[0] < big.scores("sourdough")[0]
    assert small.scores("sourdough", stats)[0] == pytest.approx(big.scores("sourdough", stats)[0], rel=0.2)


def test_a_segment_without_some_chunks_scores_as_an_index_of_the_others():
    texts = ["apple banana", "apple apple cherry", "durian apple", "cherry pie", "banana bread"]
    whole = _index(texts)
    masked = whole.without([2, 5])
    fresh = BM25Index([1, 3, 4], [" ".join(terms_for(texts[i - 1])) for i in (1, 3, 4)])
    assert len(masked) == 3 and len(whole) == 5  # the original is unchanged
    assert masked.document_frequency("apple") == 2 and masked.total_length == fresh.total_length
    for query in ("apple", "cherry", "banana durian"):
        scores = masked.scores(query)
        assert scores[[1, 4]].tolist() == [0.0, 0.0]  # the masked chunks never score
        np.testing.assert_allclose(scores[[0, 2, 3]], fresh.scores(query), rtol=1e-6)
    assert masked.without([2]) is masked and whole.without([99]) is whole


def test_letters_and_digits_match_however_they_are_written():
    """GPT4 / GPT-4 / GPT 4 / ＧＰＴ－４ and CVPR2022 / CVPR 2022 are the same terms (they did not match before)."""
    forms = ["GPT4", "GPT-4", "GPT 4", "gpt4", "ＧＰＴ－４", "ＧＰＴ４"]
    assert {tuple(index_terms(terms_for(form))) for form in forms} == {("gpt", "4")}
    assert index_terms(terms_for("CVPR2022")) == index_terms(terms_for("CVPR 2022")) == ["cvpr", "2022"]
    assert index_terms(terms_for("２０２２年")) == index_terms(terms_for("2022年"))


def test_a_query_finds_the_other_spelling():
    texts = ["GPT-4 costs twenty dollars a month.", "Papers accepted at CVPR 2022 on detection.", "Panels face south."]
    index = _index(texts)
    assert index.search("GPT4 price", 1).ids.tolist() == [1]
    assert index.search("CVPR2022 papers", 1).ids.tolist() == [2]
    assert index.search("ＣＶＰＲ２０２２", 1).ids.tolist() == [2]


def test_traditional_and_simplified_chinese_are_the_same_terms():
    """OpenCC t2s before jieba: "颱風" is "台风"; jieba, whose dictionary is simplified, also segments better."""
    assert terms_for("港口因颱風關閉，導致運輸推遲") == terms_for("港口因台风关闭，导致运输推迟")
    assert {"台风", "关闭", "运输", "推迟"} <= set(terms_for("港口因颱風關閉，導致運輸推遲"))


def test_a_traditional_query_finds_simplified_text_and_back():
    texts = ["港口因台风关闭，原材料的运输推迟了。", "銀行調高了房屋貸款的利率。", "小猫在沙发上睡着了。"]
    index = _index(texts)
    assert index.search("颱風 運輸", 1).ids.tolist() == [1]
    assert index.search("银行 贷款 利率", 1).ids.tolist() == [2]
