"""The MCP tool names of agents (api.mcp_names): readable ASCII from the API name, stable as agents come and go."""

from __future__ import annotations

from api.mcp_names import TOOL_NAME_MAX_CHARS, aliases, tool_names, transliterated


def test_a_chinese_api_name_is_transliterated_word_by_word():
    assert transliterated("光伏测算") == "guang-fu-ce-suan"
    assert transliterated("gpt助手") == "gpt-zhu-shou"
    assert transliterated("餐厅-点餐-2") == "can-ting-dian-can-2"
    assert transliterated("solar-advisor") == "solar-advisor"
    assert transliterated("SolarAdvisor_v2") == "SolarAdvisor_v2"  # an ASCII slug keeps its case
    assert transliterated("café-déjà") == "cafe-deja"


def test_names_are_unique_and_an_older_agent_keeps_its_own():
    names = tool_names([(9, "广福"), (3, "光伏"), (12, "guang-fu-9"), (20, "solar")])
    assert names == {3: "guang-fu", 9: "guang-fu-9", 12: "guang-fu-9-12", 20: "solar"}
    # An agent made later (a bigger id) never changes the names of those before it.
    later = tool_names([(9, "广福"), (3, "光伏"), (12, "guang-fu-9"), (20, "solar"), (30, "guang-fu")])
    assert {pk: later[pk] for pk in names} == names and later[30] == "guang-fu-30"


def test_a_name_is_at_most_64_characters_and_never_anothers_old_name():
    names = tool_names([(1, "x" * 100), (2, "x" * 100 + "-b"), (5, "agent_7"), (7, "智能")])
    assert names[1] == "x" * TOOL_NAME_MAX_CHARS
    assert names[2] == "x" * (TOOL_NAME_MAX_CHARS - 2) + "-2" and len(names[2]) == TOOL_NAME_MAX_CHARS
    assert names[5] == "agent_7-5"  # agent_7 is what agent 7 was called before
    assert names[7] == "zhi-neng"
    assert tool_names([(4, "")]) == {4: "agent"}


def test_the_names_clients_stored_before_stay_callable():
    assert aliases(7, "智能", "zhi-neng") == {"agent_7", "zhi-neng-7"}
    assert aliases(1, "x" * 100, "x" * 64) == {"agent_1", "x" * 100, "x" * 62 + "-1"}
    assert aliases(9, "广福", "guang-fu-9") == {"agent_9"}
