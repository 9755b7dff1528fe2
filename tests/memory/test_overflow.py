"""Token-overflow strategies (seed 4): the worked examples, tool-call groups kept whole, one system message."""

from __future__ import annotations

import random

import hypothesis
import pytest
from django.utils.functional import Promise
from hypothesis import strategies as st

from llm.messages import wire
from llm.tokens import REPLY_PRIMING, count_messages
from memory import overflow
from memory.overflow import (
    MODEL_PRESETS,
    NoStrategy,
    OverflowConfig,
    OverflowConfigError,
    SlidingWindow,
    StoredMessage,
    Summarize,
    Window,
    build_model_messages,
    fixed_tokens,
    get_strategy,
    message_tokens,
    openai_message,
    select,
    summary_prompt,
)

MODEL = "gpt-4"


def user(id: int, tokens: int = 10, content: str = "") -> StoredMessage:
    return StoredMessage(id=id, role="user", content=content or f"user {id}", token_count=tokens)


def assistant(id: int, tokens: int = 10, content: str = "") -> StoredMessage:
    return StoredMessage(id=id, role="assistant", content=content or f"assistant {id}", token_count=tokens)


def call(id: int, *call_ids: str, tokens: int = 10) -> StoredMessage:
    tool_calls = [{"id": c, "type": "function", "function": {"name": "lookup", "arguments": "{}"}} for c in call_ids]
    return StoredMessage(id=id, role="assistant", content="", tool_calls=tool_calls, token_count=tokens)


def result(id: int, call_id: str, tokens: int = 10) -> StoredMessage:
    return StoredMessage(id=id, role="tool", content=f"result {id}", tool_call_id=call_id, token_count=tokens)


def chat(n: int, tokens: int, first_id: int = 1) -> list[StoredMessage]:
    """n messages alternating user/assistant, ending with a user message."""
    start = 0 if n % 2 else 1
    return [(user if (i + start) % 2 == 0 else assistant)(first_id + i, tokens) for i in range(n)]


def ids(messages) -> list[int]:
    return [m.id for m in messages]


def config(strategy: str, max_tokens: int | None = 8000, **kwargs) -> OverflowConfig:
    return OverflowConfig.from_dict({"strategy": strategy, "max_tokens": max_tokens, **kwargs})


# --- seed 4's worked examples -----------------------------------------------------------------------------------


def test_sliding_window_of_8000_keeps_about_7200_tokens_from_the_newest():
    messages = chat(19, tokens=500)  # 9500 tokens, over the limit (seed 4, 6.2)
    window = SlidingWindow().select(messages, config("sliding_window"), fixed_tokens=0)
    assert window.budget == 7200
    assert window.triggered and not window.over_budget
    assert ids(window.messages) == list(range(6, 20))  # the newest 14: 7000 tokens, a 15th would make 7500
    assert window.tokens_sent == 7000
    assert window.dropped_ids == (1, 2, 3, 4, 5)
    assert window.summarize_ids == ()
    assert window.tokens_saved == 2500


def test_sliding_window_counts_the_system_message_in_the_budget():
    messages = chat(19, tokens=500)
    window = SlidingWindow().select(messages, config("sliding_window"), fixed_tokens=600)
    assert ids(window.messages) == list(range(7, 20))  # 600 + 13 * 500 = 7100 <= 7200
    assert window.tokens_sent == 7100


def test_sliding_window_leaves_a_fitting_conversation_alone():
    messages = chat(9, tokens=500)
    window = SlidingWindow().select(messages, config("sliding_window"), fixed_tokens=100)
    assert ids(window.messages) == ids(messages)
    assert not window.triggered and window.dropped_ids == () and window.tokens_saved == 0


def test_summarize_25_messages_with_threshold_20_marks_the_earliest_5_then_the_next_5():
    cfg = config("summarize", summary_threshold=20)
    messages = chat(25, tokens=50, first_id=1)
    window = Summarize().select(messages, cfg, fixed_tokens=200)
    assert window.triggered
    assert window.summarize_ids == (1, 2, 3, 4, 5)
    assert ids(window.messages) == list(range(6, 26))
    assert window.dropped_ids == ()  # nothing is lost: the 5 stay active until the summary holds them
    assert window.tokens_saved == 250

    # The summary task ran: active messages are the newest 20; the user sends 5 more (seed 4, 5.3 step 3).
    active = [m for m in messages if m.id not in window.summarize_ids] + chat(5, tokens=50, first_id=26)
    second = Summarize().select(active, cfg, fixed_tokens=300)
    assert second.summarize_ids == (6, 7, 8, 9, 10)
    assert ids(second.messages) == list(range(11, 31))


def test_summarize_below_the_threshold_and_the_budget_does_nothing():
    window = Summarize().select(chat(20, tokens=50), config("summarize"), fixed_tokens=200)
    assert not window.triggered
    assert len(window.messages) == 20 and window.summarize_ids == ()


def test_summarize_triggered_by_tokens_marks_what_does_not_fit():
    messages = chat(10, tokens=1000)  # 10 messages, under the threshold, but 10000 tokens
    window = Summarize().select(messages, config("summarize"), fixed_tokens=0)
    assert window.triggered
    assert ids(window.messages) == list(range(4, 11))  # 7000 <= 7200
    assert window.summarize_ids == (1, 2, 3)


def test_summarize_sends_a_window_that_fits_when_the_kept_messages_do_not():
    messages = chat(25, tokens=500)  # the newest 20 alone are 10000 tokens
    window = Summarize().select(messages, config("summarize"), fixed_tokens=0)
    assert window.tokens_sent <= 7200
    assert ids(window.messages) == list(range(12, 26))
    assert window.summarize_ids == tuple(range(1, 12))
    assert not window.over_budget


def test_no_strategy_sends_everything_even_past_the_limit():
    messages = chat(19, tokens=500)
    window = NoStrategy().select(messages, OverflowConfig(), fixed_tokens=100)
    assert ids(window.messages) == ids(messages)
    assert window.tokens_sent == 9600
    assert not window.triggered and window.budget is None and not window.over_budget


# --- tool-call groups -------------------------------------------------------------------------------------------


def tool_conversation() -> list[StoredMessage]:
    return [
        user(1, 100),
        call(2, "c1", "c2", tokens=50),
        result(3, "c1", 400),
        result(4, "c2", 400),
        assistant(5, 100),
        user(6, 100),
        assistant(7, 100),
        user(8, 100),
    ]


@pytest.mark.parametrize(
    ("strategy", "max_tokens", "threshold", "sent", "dropped", "summarized"),
    [
        # Room for 5..8 and for message 4 alone, never for 4 without 2 and 3: the group goes whole.
        ("sliding_window", 1000, 20, [5, 6, 7, 8], [1, 2, 3, 4], []),
        ("sliding_window", 1300, 20, [2, 3, 4, 5, 6, 7, 8], [1], []),
        ("sliding_window", 2000, 20, [1, 2, 3, 4, 5, 6, 7, 8], [], []),
        # The threshold line falls inside the group (keep 6 would be 3..8): the group goes to the summary whole.
        ("summarize", 10000, 6, [5, 6, 7, 8], [], [1, 2, 3, 4]),
        ("summarize", 10000, 7, [2, 3, 4, 5, 6, 7, 8], [], [1]),
        ("summarize", 1000, 20, [5, 6, 7, 8], [], [1, 2, 3, 4]),
        ("none", None, 20, [1, 2, 3, 4, 5, 6, 7, 8], [], []),
    ],
)
def test_a_tool_call_and_its_results_stay_together(strategy, max_tokens, threshold, sent, dropped, summarized):
    cfg = OverflowConfig(strategy=strategy, max_tokens=max_tokens, reserve_ratio=0, summary_threshold=threshold)
    window = select(tool_conversation(), cfg, fixed_tokens=0)
    assert ids(window.messages) == sent
    assert list(window.dropped_ids) == dropped
    assert list(window.summarize_ids) == summarized


@pytest.mark.parametrize("strategy", ["none", "sliding_window", "summarize"])
def test_messages_no_server_accepts_are_left_out(strategy):
    messages = [
        result(1, "gone"),  # its call was dropped long ago
        user(2),
        call(3, "a", "b"),
        result(4, "a"),  # "b" never answered: a crash mid-tool
        user(5),
        call(6, "a"),
        result(7, "a"),
        result(8, "a"),  # a second answer to the same call
        assistant(9),
        user(10),
    ]
    window = select(messages, config(strategy, max_tokens=100000), fixed_tokens=0)
    assert ids(window.messages) == [2, 5, 6, 7, 9, 10]
    assert window.unpaired_ids == (1, 3, 4, 8)
    assert set(window.unpaired_ids) <= set(window.dropped_ids)
    assert not window.triggered


def test_a_reused_call_id_pairs_with_the_latest_call():
    # Some OpenAI-compatible servers name the first call of every turn "call_0".
    messages = [user(1), call(2, "call_0"), result(3, "call_0"), assistant(4), user(5), call(6, "call_0")]
    window = select(messages, config("none"), fixed_tokens=0)
    assert ids(window.messages) == [1, 2, 3, 4, 5]
    assert window.unpaired_ids == (6,)


def test_the_newest_user_message_is_sent_even_when_it_alone_is_over_budget():
    messages = [*chat(5, tokens=100), user(6, tokens=9000)]
    for strategy in ("sliding_window", "summarize"):
        window = select(messages, config(strategy), fixed_tokens=100)
        assert ids(window.messages) == [6]
        assert window.over_budget
        assert window.tokens_sent == 9100


def test_the_newest_user_message_stays_when_a_tool_result_after_it_is_too_large():
    messages = [*chat(3, tokens=100), user(4, 100), call(5, "x", tokens=50), result(6, "x", tokens=9000)]
    window = select(messages, config("sliding_window"), fixed_tokens=0)
    assert ids(window.messages) == [4]
    assert window.dropped_ids == (1, 2, 3, 5, 6)
    assert not window.over_budget


# --- invariants over random conversations -----------------------------------------------------------------------


def random_conversation(rng: random.Random) -> list[StoredMessage]:
    messages: list[StoredMessage] = []

    def add(role: str, **kwargs) -> None:
        size = rng.choice([rng.randint(1, 60), rng.randint(1, 400), rng.randint(500, 3000)])
        messages.append(StoredMessage(id=len(messages) + 1, role=role, content="x", token_count=size, **kwargs))

    for _turn in range(rng.randint(0, 18)):
        if rng.random() < 0.05:
            add("system")
        if rng.random() < 0.05:
            add("tool", tool_call_id=f"call_{rng.randint(0, 3)}")  # an orphan, or a stray second answer
        add("user")
        for _step in range(rng.choice([0, 0, 1, 2, 3])):
            call_ids = [f"call_{i}" for i in range(rng.randint(1, 3))]  # reused every turn on purpose
            tool_calls = [{"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}} for c in call_ids]
            add("assistant", tool_calls=tool_calls)
            answered = call_ids if rng.random() > 0.07 else call_ids[:-1]
            for call_id in answered:
                add("tool", tool_call_id=call_id)
        if rng.random() < 0.8:
            add("assistant")
    if rng.random() < 0.7:
        add("user")
    return messages


def assert_valid_request(sent: tuple[StoredMessage, ...]) -> None:
    """What an OpenAI server checks: tool calls answered right after, by exactly their ids; no stray tool message."""
    position = 0
    while position < len(sent):
        message = sent[position]
        assert message.role != "tool", f"orphan tool message {message.id}"
        if message.tool_calls:
            wanted = [c["id"] for c in message.tool_calls]
            answers = sent[position + 1 : position + 1 + len(wanted)]
            assert [m.role for m in answers] == ["tool"] * len(wanted), f"call {message.id} not answered"
            assert sorted(m.tool_call_id for m in answers) == sorted(wanted)
            position += len(wanted)
        position += 1


def check_window(messages: list[StoredMessage], cfg: OverflowConfig, fixed: int, context: str = "") -> None:
    """Every invariant of a strategy's choice: a valid request (no split tool pair, no orphan), every message sent,
    dropped or queued for the summary exactly once, the counts right, the budget kept unless the newest user message
    alone exceeds it, older messages leaving first."""
    window = select(messages, cfg, fixed_tokens=fixed)
    position = {m.id: i for i, m in enumerate(messages)}
    sent = ids(window.messages)
    assert sent == sorted(sent, key=position.__getitem__), context
    assert_valid_request(window.messages)

    every = set(position)
    assert set(sent) | set(window.dropped_ids) | set(window.summarize_ids) == every, context
    assert len(sent) + len(window.dropped_ids) + len(window.summarize_ids) == len(every), context
    by_id = {m.id: m for m in messages}
    assert window.tokens_sent == fixed + sum(m.token_count for m in window.messages), context
    assert window.tokens_saved == sum(by_id[i].token_count for i in every - set(sent)), context

    users = [m for m in messages if m.role == "user"]
    if users:
        assert users[-1].id in sent, context
    if window.budget is not None and window.over_budget:
        # Over budget only when the fixed part and the newest user message (if any) alone exceed it.
        assert fixed + (users[-1].token_count if users else 0) > window.budget, context
    elif window.budget is not None:
        assert window.tokens_sent <= window.budget, context

    # Older messages go first: apart from the newest user message, what is sent is the newest sendable ones.
    newest_user = {users[-1].id} if users else set()
    sendable = [m.id for m in messages if m.id not in window.unpaired_ids and m.id not in newest_user]
    rest = [i for i in sent if i not in newest_user]
    if rest:
        assert rest == sendable[-len(rest) :], context
    if cfg.strategy == "none":
        assert sent == [m.id for m in messages if m.id not in window.unpaired_ids], context
    if cfg.strategy != "summarize":
        assert window.summarize_ids == (), context
    else:
        assert set(window.dropped_ids) == set(window.unpaired_ids), context
    # Exactly one system message reaches the model, first, whatever the window holds.
    request = wire(build_model_messages(system_prompt="You help.", summary=None, window=window))
    assert [m["role"] for m in request].count("system") == 1 and request[0]["role"] == "system", context


def random_config(rng: random.Random) -> OverflowConfig:
    return OverflowConfig(
        strategy=rng.choice(["none", "sliding_window", "summarize"]),
        max_tokens=rng.choice([1000, 4096, 8192, 20000]),
        reserve_ratio=rng.choice([0, 0.1, 0.25]),
        summary_threshold=rng.randint(2, 30),
    )


def test_invariants_hold_for_every_strategy_over_random_conversations():
    rng = random.Random(4)
    for case in range(1500):
        messages, cfg, fixed = random_conversation(rng), random_config(rng), rng.randint(0, 800)
        check_window(messages, cfg, fixed, f"case {case}: {cfg} fixed={fixed}")


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(rng=st.randoms(use_true_random=False), fixed=st.integers(min_value=0, max_value=2000))
def test_invariants_hold_for_every_strategy_by_hypothesis(rng, fixed):
    """The same invariants, with Hypothesis choosing (and, on a failure, shrinking) the conversation and config."""
    check_window(random_conversation(rng), random_config(rng), fixed)


def test_an_empty_conversation_whose_fixed_part_exceeds_the_budget():
    """What Hypothesis found in CI: no messages yet, a system prompt alone over the budget."""
    config = OverflowConfig(strategy="sliding_window", max_tokens=1000, reserve_ratio=0, summary_threshold=2)
    check_window([], config, 1001)


# --- what goes to the model -------------------------------------------------------------------------------------


def stored(id: int, role: str, content: str | None, tool_calls=None, tool_call_id=None) -> StoredMessage:
    return StoredMessage(
        id=id,
        role=role,
        content=content or "",
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        token_count=message_tokens(role, content, tool_calls, tool_call_id, MODEL),
    )


TOOL_CALLS = [{"id": "call_1", "type": "function", "function": {"name": "menu", "arguments": '{"dish": "麻婆豆腐"}'}}]
HISTORY = [
    stored(1, "user", "今天的菜单有什么？"),
    stored(2, "assistant", None, TOOL_CALLS),
    stored(3, "tool", '{"spicy": true, "辣度": 3}', tool_call_id="call_1"),
    stored(4, "assistant", "麻婆豆腐 is spicy (辣度 3)."),
    stored(5, "user", "I can't eat spicy food. 还有别的吗？"),
]


@pytest.mark.parametrize("message", HISTORY, ids=lambda m: m.role)
def test_message_tokens_is_count_messages_of_that_message_without_the_reply_priming(message):
    as_sent = openai_message(message.role, message.content, message.tool_calls, message.tool_call_id).as_dict()
    assert message.token_count == count_messages([as_sent], MODEL) - REPLY_PRIMING
    assert message.token_count + REPLY_PRIMING == count_messages([as_sent], MODEL)


def test_the_prompt_costs_exactly_fixed_tokens_plus_the_stored_counts():
    prompt, summary, recalled = "You are a waiter. 你是服务员。", "The user is vegetarian. 用户吃素。", ["Likes tofu"]
    fixed = fixed_tokens(system_prompt=prompt, summary=summary, recalled=recalled, model=MODEL)
    window = select(HISTORY, config("sliding_window"), fixed_tokens=fixed)
    request = wire(build_model_messages(system_prompt=prompt, summary=summary, window=window, recalled=recalled))
    assert count_messages(request, MODEL) == window.tokens_sent == fixed + sum(m.token_count for m in HISTORY)


def test_build_model_messages_sends_exactly_one_system_message_first():
    history = [stored(10, "system", "The plan was interrupted at step 2."), *HISTORY]
    window = select(history, config("none", max_tokens=None), fixed_tokens=0)
    request = wire(build_model_messages(
        system_prompt="You are a waiter.", summary="Earlier: the user booked a table for 4.", window=window,
        recalled=["The user is allergic to peanuts"],
    ))  # fmt: skip
    assert [m["role"] for m in request].count("system") == 1
    assert request[0]["role"] == "system"
    system = request[0]["content"]
    assert system.startswith("You are a waiter.")
    assert "之前对话的摘要" in system and "booked a table for 4" in system
    assert "allergic to peanuts" in system
    assert "The plan was interrupted at step 2." in system  # stored system messages are merged, not dropped
    assert count_messages(request, MODEL) <= window.tokens_sent + fixed_tokens(
        system_prompt="You are a waiter.", summary="Earlier: the user booked a table for 4.",
        recalled=["The user is allergic to peanuts"], model=MODEL,
    )  # fmt: skip
    assert [m["role"] for m in request[1:]] == ["user", "assistant", "tool", "assistant", "user"]
    assert request[2] == {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS}
    assert request[3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"spicy": true, "辣度": 3}'}


def test_build_model_messages_without_a_summary_has_no_summary_heading():
    window = Window(messages=(HISTORY[0],))
    request = wire(build_model_messages(system_prompt="Be brief.", summary=None, window=window))
    assert request == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "今天的菜单有什么？"}]


def test_summary_prompt_first_and_incremental():
    first = wire(summary_prompt(previous_summary=None, messages=HISTORY))
    assert [m["role"] for m in first] == ["system", "user"]
    assert "name" in first[0]["content"] and "人名" in first[0]["content"]
    assert "open" in first[0]["content"] and "尚未解决" in first[0]["content"]
    assert "今天的菜单有什么？" in first[1]["content"] and "menu" in first[1]["content"]
    assert "已有摘要" not in first[1]["content"]

    later = wire(summary_prompt(previous_summary="The user wants dinner for 4.", messages=HISTORY[3:]))
    assert "The user wants dinner for 4." in later[1]["content"]
    assert "已有摘要" in later[1]["content"] and "Existing summary" in later[1]["content"]


def test_summary_prompt_cuts_very_long_tool_results():
    huge = StoredMessage(id=1, role="tool", content="x" * 50000, tool_call_id="c", token_count=0)
    prompt = wire(summary_prompt(previous_summary=None, messages=[huge], max_chars_per_message=1000))
    assert len(prompt[1]["content"]) < 1500


# --- configuration ----------------------------------------------------------------------------------------------


def test_config_defaults_and_round_trip():
    assert OverflowConfig.from_dict(None) == OverflowConfig.from_dict({}) == OverflowConfig()
    cfg = OverflowConfig.from_dict({"strategy": "summarize", "max_tokens": 8192})
    assert cfg.to_dict() == {"strategy": "summarize", "max_tokens": 8192, "reserve_ratio": 0.1, "summary_threshold": 20}
    assert OverflowConfig.from_dict(cfg.to_dict()) == cfg
    assert OverflowConfig.from_dict(OverflowConfig().to_dict()) == OverflowConfig()
    assert cfg.budget == 7372


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"strategy": "truncate"}, "strategy"),
        ({"strategy": "sliding_window"}, "max_tokens"),
        ({"strategy": "summarize", "max_tokens": 0}, "max_tokens"),
        ({"strategy": "summarize", "max_tokens": "8000"}, "max_tokens"),
        ({"strategy": "sliding_window", "max_tokens": True}, "max_tokens"),
        ({"strategy": "none", "max_tokens": -5}, "max_tokens"),
        ({"strategy": "sliding_window", "max_tokens": 1, "reserve_ratio": 0.5}, "max_tokens"),
        ({"strategy": "sliding_window", "max_tokens": 8000, "reserve_ratio": 0.95}, "reserve_ratio"),
        ({"strategy": "sliding_window", "max_tokens": 8000, "reserve_ratio": 0.6}, "reserve_ratio"),
        ({"strategy": "sliding_window", "max_tokens": 8000, "reserve_ratio": -0.1}, "reserve_ratio"),
        ({"strategy": "sliding_window", "max_tokens": 8000, "reserve_ratio": "0.1"}, "reserve_ratio"),
        ({"strategy": "summarize", "max_tokens": 8000, "summary_threshold": 1}, "summary_threshold"),
        ({"strategy": "summarize", "max_tokens": 8000, "summary_threshold": 2.5}, "summary_threshold"),
        ({"strategy": "none", "window": 3}, "window"),
    ],
)
def test_config_errors_name_the_field(data, field):
    with pytest.raises(OverflowConfigError) as caught:
        OverflowConfig.from_dict(data)
    assert caught.value.field == field
    assert isinstance(caught.value.message, Promise)  # translatable, rendered in the user's language
    assert str(caught.value).startswith(f"{field}: ")
    assert str(caught.value.message)


def test_config_accepts_the_edges():
    assert OverflowConfig.from_dict({"strategy": "sliding_window", "max_tokens": 3, "reserve_ratio": 0.5}).budget == 1
    assert OverflowConfig.from_dict({"strategy": "summarize", "max_tokens": 4096, "summary_threshold": 2})
    assert OverflowConfig.from_dict({"strategy": "none", "max_tokens": 4096, "reserve_ratio": 0}).budget == 4096


def test_model_presets():
    assert [(label, size) for _key, label, size in MODEL_PRESETS] == [
        ("GPT-3.5 (4K)", 4096),
        ("GPT-4 (8K)", 8192),
        ("GPT-4o (128K)", 128000),
        ("DeepSeek (64K)", 65536),
        ("Qwen (128K)", 131072),
    ]
    assert len({key for key, _label, _size in MODEL_PRESETS}) == len(MODEL_PRESETS)


def test_strategies_come_from_the_registry():
    assert {name: type(get_strategy(name)) for name in overflow.STRATEGIES} == {
        "none": NoStrategy,
        "sliding_window": SlidingWindow,
        "summarize": Summarize,
    }
    with pytest.raises(OverflowConfigError):
        get_strategy("truncate")
    with pytest.raises(NotImplementedError):
        overflow.OverflowStrategy().select([], OverflowConfig(), fixed_tokens=0)


def test_a_late_answer_to_an_unanswered_call_is_not_glued_to_it():
    # The call crashed; a later turn's stray result reuses its id. Servers want results right after the call.
    messages = [user(1), call(2, "call_0"), user(3), result(4, "call_0"), user(5)]
    window = select(messages, config("sliding_window"), fixed_tokens=0)
    assert ids(window.messages) == [1, 3, 5]
    assert window.unpaired_ids == (2, 4)


def test_sliding_window_first_needed_gives_the_same_window_as_the_whole_history():
    # The platform loads only the messages the window can keep; the result must not change.
    import random

    rng = random.Random(7)
    config = OverflowConfig.from_dict({"strategy": "sliding_window", "max_tokens": 600, "reserve_ratio": 0.1})
    strategy = get_strategy("sliding_window")
    for _ in range(300):
        messages, next_id = [], 1
        for _turn in range(rng.randint(1, 60)):
            roll = rng.random()
            if roll < 0.15:
                calls = [
                    {"id": f"c{next_id}-{k}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    for k in range(rng.randint(1, 2))
                ]
                messages.append(
                    StoredMessage(
                        id=next_id, role="assistant", content="", tool_calls=calls, token_count=rng.randint(5, 60)
                    )
                )
                next_id += 1
                for call in calls:
                    messages.append(
                        StoredMessage(
                            id=next_id,
                            role="tool",
                            content="r",
                            tool_call_id=call["id"],
                            token_count=rng.randint(5, 120),
                        )
                    )
                    next_id += 1
            else:
                role = "user" if roll < 0.6 else "assistant"
                messages.append(StoredMessage(id=next_id, role=role, content="x", token_count=rng.randint(1, 150)))
                next_id += 1
        fixed = rng.randint(5, 80)
        start = strategy.first_needed([(m.role, m.token_count) for m in messages], config, fixed_tokens=fixed)
        whole = strategy.select(messages, config, fixed_tokens=fixed)
        suffix = strategy.select(messages[start:], config, fixed_tokens=fixed)
        assert [m.id for m in suffix.messages] == [m.id for m in whole.messages]
        assert suffix.over_budget == whole.over_budget
        assert suffix.tokens_sent == whole.tokens_sent
