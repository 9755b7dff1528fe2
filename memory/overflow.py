"""Token-overflow strategies (seed 4): which stored messages reach the model when a conversation outgrows its window.

Pure logic: no database, no model calls. The caller (the conversation services and the runtime) passes the
conversation's active messages with their stored token counts, and gets back a `Window`: what to send now, what
to drop from the context for good, and what to hand to the background summary task. See docs/overflow.md.

Invariants every strategy keeps (tests/memory/test_overflow.py checks them over many random conversations):
- the window keeps the conversation's order;
- an assistant message with `tool_calls` and the `tool` messages right after it that answer it (by `tool_call_id`)
  are kept, dropped or summarised together; a window never holds an orphan `tool` message or an unanswered call;
- the newest user message (the one being answered) is always sent; if it alone does not fit, the window says
  so with `over_budget` instead of dropping it;
- `tokens_sent` (the whole prompt: system message plus window) stays within the budget unless `over_budget`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.utils.functional import Promise
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from llm.messages import ROLES, ChatMessage, Role
from llm.tokens import REPLY_PRIMING, count_messages

STRATEGY_NONE = "none"
STRATEGY_SLIDING_WINDOW = "sliding_window"
STRATEGY_SUMMARIZE = "summarize"

# For the configuration form and the admin (seed 4, section 7.3): value, label, help text.
STRATEGY_CHOICES: list[tuple[str, Promise, Promise]] = [
    (STRATEGY_NONE, _("No strategy"), _("Send every message; a long conversation may exceed the model's limit.")),
    (
        STRATEGY_SLIDING_WINDOW,
        _("Sliding window"),
        _("Drop the oldest messages so the newest ones fit; nothing is summarised."),
    ),
    (
        STRATEGY_SUMMARIZE,
        _("Summarize"),
        _("Turn older messages into a summary, keep the newest ones and the key information."),
    ),
]

# Quick choices for max_tokens in the configuration form: key, label, context window in tokens.
MODEL_PRESETS: list[tuple[str, str, int]] = [
    ("gpt-3.5-4k", "GPT-3.5 (4K)", 4096),
    ("gpt-4-8k", "GPT-4 (8K)", 8192),
    ("gpt-4o-128k", "GPT-4o (128K)", 128000),
    ("deepseek-64k", "DeepSeek (64K)", 65536),
    ("qwen-128k", "Qwen (128K)", 131072),
]

DEFAULT_RESERVE_RATIO = 0.1
MAX_RESERVE_RATIO = 0.5  # seed 4 / issue 4: at most half the window is kept for the reply
DEFAULT_SUMMARY_THRESHOLD = 20
MIN_SUMMARY_THRESHOLD = 2

# Headings inside the one system message. Not translated on purpose: the text reaches the model, and the token
# count of the system message must not depend on the language of whoever happens to trigger the turn.
SUMMARY_HEADING = "## Summary of the earlier conversation / 之前对话的摘要"
RECALLED_HEADING = "## Things you remember about this user / 关于该用户的记忆"


# --- configuration ----------------------------------------------------------------------------------------------


# Tokens a budget must hold beyond the system prompt: one short user message (agents.forms checks it).
MIN_EXCHANGE_TOKENS = 64


class OverflowConfigError(ValueError):
    """A token_overflow_config that cannot be used; `field` names the offending key, `message` is translatable."""

    def __init__(self, field: str, message: str | Promise) -> None:
        self.field = field
        self.message = message
        super().__init__(field, message)

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class OverflowConfig:
    """A validated token_overflow_config (seed 4): the strategy and its parameters, as stored on an agent."""

    strategy: str = STRATEGY_NONE
    max_tokens: int | None = None
    reserve_ratio: float = DEFAULT_RESERVE_RATIO
    summary_threshold: int = DEFAULT_SUMMARY_THRESHOLD

    FIELDS: ClassVar[tuple[str, ...]] = ("strategy", "max_tokens", "reserve_ratio", "summary_threshold")

    def __post_init__(self) -> None:
        # Validated here rather than only in from_dict, so that no invalid config can exist at all.
        if self.strategy not in STRATEGIES:
            allowed = ", ".join(STRATEGIES)
            raise OverflowConfigError("strategy", format_lazy(_("Unknown strategy; choose one of: {}."), allowed))
        if self.max_tokens is None:
            if self.strategy != STRATEGY_NONE:
                raise OverflowConfigError("max_tokens", _("Set the maximum number of tokens for this strategy."))
        elif not _is_int(self.max_tokens) or self.max_tokens <= 0:
            raise OverflowConfigError("max_tokens", _("The maximum number of tokens must be a whole number above 0."))
        ratio = self.reserve_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= MAX_RESERVE_RATIO:
            raise OverflowConfigError(
                "reserve_ratio", format_lazy(_("The reserve ratio must be a number from 0 to {}."), MAX_RESERVE_RATIO)
            )
        if not _is_int(self.summary_threshold) or self.summary_threshold < MIN_SUMMARY_THRESHOLD:
            raise OverflowConfigError(
                "summary_threshold",
                format_lazy(_("The summary threshold must be a whole number of messages, at least {}."),
                            MIN_SUMMARY_THRESHOLD),
            )  # fmt: skip
        if self.budget is not None and self.budget < 1:
            raise OverflowConfigError("max_tokens", _("The maximum number of tokens leaves no room after the reserve."))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> OverflowConfig:
        """Parse a stored or submitted token_overflow_config; missing keys get their defaults, unknown keys fail."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise OverflowConfigError("token_overflow_config", _("The configuration must be a JSON object."))
        for key in data:
            if key not in cls.FIELDS:
                raise OverflowConfigError(
                    str(key), format_lazy(_("Unknown setting; allowed settings are: {}."), ", ".join(cls.FIELDS))
                )
        return cls(**{key: data[key] for key in cls.FIELDS if key in data and data[key] is not None})

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored on agents, versions and conversation contexts (from_dict reads it back)."""
        return {
            "strategy": self.strategy,
            "max_tokens": self.max_tokens,
            "reserve_ratio": self.reserve_ratio,
            "summary_threshold": self.summary_threshold,
        }

    @property
    def budget(self) -> int | None:
        """Prompt tokens allowed: max_tokens less the reserve kept for the reply (8000 at 10% gives 7200)."""
        if self.max_tokens is None:
            return None
        # The epsilon keeps 8000 * 0.9 from flooring to 7199 on a float that lands just below 7200.
        return math.floor(self.max_tokens * (1 - self.reserve_ratio) + 1e-9)


# --- messages and their tokens ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredMessage:
    """One stored message of a conversation, with the token count computed once by `message_tokens`."""

    id: int
    role: str
    content: str
    tool_calls: list[dict] | None = None
    tool_call_id: str | None = None
    token_count: int = 0

    @property
    def call_ids(self) -> tuple[str, ...]:
        """The ids of the tool calls this assistant message makes (empty for other messages)."""
        if self.role != Role.ASSISTANT or not self.tool_calls:
            return ()
        return tuple(str(call.get("id") or "") for call in self.tool_calls)

    def chat_message(self) -> ChatMessage:
        """The message as it is sent to the model."""
        return openai_message(self.role, self.content, self.tool_calls, self.tool_call_id)


def openai_message(
    role: str, content: str | None, tool_calls: Sequence[dict] | None = None, tool_call_id: str | None = None
) -> ChatMessage:
    """One stored message's fields as the chat message that is sent (and therefore as it is counted)."""
    return ChatMessage.from_stored(role, content, tool_calls, tool_call_id)


def message_tokens(
    role: str, content: str | None, tool_calls: Sequence[dict] | None, tool_call_id: str | None, model: str
) -> int:
    """The tokens one message adds to a request, for `StoredMessage.token_count`; store it once, when saving.

    This is `llm.tokens.count_messages([message])` less the reply priming, which a request pays once, not per
    message: so `fixed_tokens(...) + sum(message_tokens)` equals `count_messages` of the whole request.
    """
    return count_messages([openai_message(role, content, tool_calls, tool_call_id).as_dict()], model) - REPLY_PRIMING


def system_content(
    *,
    system_prompt: str,
    summary: str | None = None,
    recalled: Iterable[str] = (),
    notes: Iterable[str] = (),
    documents: str = "",
) -> str:
    """The text of the one system message: the agent's prompt, then the summary, recalled memories, the passages
    of the conversation's documents (memory.attachments) and notes."""
    parts = [system_prompt.strip()] if system_prompt and system_prompt.strip() else []
    if summary and summary.strip():
        parts.append(f"{SUMMARY_HEADING}\n{summary.strip()}")
    memories = [text.strip() for text in recalled if text and text.strip()]
    if memories:
        parts.append(RECALLED_HEADING + "\n" + "\n".join(f"- {text}" for text in memories))
    if documents.strip():
        parts.append(documents.strip())
    parts.extend(note.strip() for note in notes if note and note.strip())
    return "\n\n".join(parts)


def fixed_tokens(
    *, system_prompt: str, summary: str | None, recalled: Iterable[str] = (), model: str, documents: str = ""
) -> int:
    """What the system message (prompt, summary, recalled memories, documents' passages) and reply priming cost:
    select's fixed_tokens."""
    content = system_content(system_prompt=system_prompt, summary=summary, recalled=recalled, documents=documents)
    return count_messages([ChatMessage.system(content).as_dict()], model)


@dataclass(frozen=True)
class Addition:
    """What a stored message carries beyond its text when sent: its files' text, after the message's own, and
    content parts (images for a vision model). Counted in the message's stored token_count."""

    text: str = ""
    parts: tuple[Mapping[str, Any], ...] = ()

    def message(self, stored: StoredMessage) -> ChatMessage:
        """The stored message with this addition, as it is sent."""
        text = "\n\n".join(piece for piece in (stored.content, self.text) if piece)
        return ChatMessage(stored.role, text, parts=self.parts or None)


# --- the window -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """What a strategy chose for one turn.

    `dropped_ids` leave the context for good (the caller removes them from active_messages now);
    `summarize_ids` stay active until the summary task has merged them into the summary, then leave.
    `tokens_sent` is the whole prompt (fixed_tokens plus the window's messages), comparable with `budget`.
    `tokens_saved` counts the active messages' tokens not sent this turn. `unpaired_ids` (also in dropped_ids)
    are tool messages without their call, or calls without all their results: no model server accepts them.
    """

    messages: tuple[StoredMessage, ...]
    dropped_ids: tuple[int, ...] = ()
    summarize_ids: tuple[int, ...] = ()
    triggered: bool = False
    tokens_sent: int = 0
    tokens_saved: int = 0
    over_budget: bool = False
    budget: int | None = None
    unpaired_ids: tuple[int, ...] = ()


@dataclass
class _Unit:
    """Messages that are sent, dropped or summarised together: one message, or a tool call with its results."""

    indexes: list[int] = field(default_factory=list)
    tokens: int = 0
    size: int = 0
    has_user: bool = False


@dataclass
class _Conversation:
    messages: Sequence[StoredMessage]
    units: list[_Unit]
    unpaired: set[int]

    @property
    def newest_user(self) -> int | None:
        """The unit holding the newest user message: the one being answered, never dropped."""
        for position in range(len(self.units) - 1, -1, -1):
            if self.units[position].has_user:
                return position
        return None

    def unit_tokens(self) -> int:
        return sum(unit.tokens for unit in self.units)


def _partition(messages: Sequence[StoredMessage]) -> _Conversation:
    """Group messages into units and set apart the ones no model server would accept.

    As the OpenAI API requires, a call's results are the `tool` messages directly after the assistant message that
    makes it, matched by tool_call_id. Matching only there (not across the conversation) also copes with servers
    that name the first call of every turn "call_0".
    """
    units: list[_Unit] = []
    unpaired: set[int] = set()
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.role not in ROLES:
            raise ValueError(f"Message {message.id} has unknown role {message.role!r}: use one of {sorted(ROLES)}.")
        block = [index]
        index += 1
        if message.call_ids:
            wanted, answered = set(message.call_ids), set()
            while index < len(messages) and messages[index].role == Role.TOOL:
                call_id = messages[index].tool_call_id
                if call_id in wanted and call_id not in answered:
                    answered.add(call_id)
                    block.append(index)
                else:  # an answer to some other call, or a second answer to this one
                    unpaired.add(index)
                index += 1
            if answered != wanted or "" in wanted:  # a call left unanswered (a crash mid-tool) cannot be sent
                unpaired.update(block)
                continue
        elif message.role == Role.TOOL:  # its call was dropped, or never directly preceded it
            unpaired.add(block[0])
            continue
        unit = _Unit(indexes=block, size=len(block))
        unit.tokens = sum(messages[position].token_count for position in block)
        unit.has_user = message.role == Role.USER
        units.append(unit)
    return _Conversation(messages=messages, units=units, unpaired=unpaired)


def _fit(conversation: _Conversation, *, first: int, room: int) -> tuple[set[int], int]:
    """The newest units from `first` on that fit in `room` tokens, plus the newest user message whatever it costs.

    Stops at the first unit that does not fit, so an older message never takes the place of a newer one.
    """
    units = conversation.units
    chosen: set[int] = set()
    used = 0
    forced = conversation.newest_user
    if forced is not None:
        chosen.add(forced)
        used = units[forced].tokens
    for position in range(len(units) - 1, first - 1, -1):
        if position == forced:
            continue
        if used + units[position].tokens > room:
            break
        chosen.add(position)
        used += units[position].tokens
    return chosen, used


def _window(
    conversation: _Conversation,
    chosen: set[int],
    *,
    fixed_tokens: int,
    budget: int | None,
    summarize: bool = False,
) -> Window:
    """Assemble the Window: the chosen units are sent; the others are dropped, or summarised when `summarize`."""
    messages = conversation.messages
    sent = sorted(index for position in chosen for index in conversation.units[position].indexes)
    left_out = sorted(
        index for position, unit in enumerate(conversation.units) if position not in chosen for index in unit.indexes
    )
    unpaired = sorted(conversation.unpaired)
    to_summarize = left_out if summarize else []
    dropped = sorted(set(unpaired) | (set() if summarize else set(left_out)))
    tokens_sent = fixed_tokens + sum(messages[index].token_count for index in sent)
    return Window(
        messages=tuple(messages[index] for index in sent),
        dropped_ids=tuple(messages[index].id for index in dropped),
        summarize_ids=tuple(messages[index].id for index in to_summarize),
        triggered=bool(left_out),
        tokens_sent=tokens_sent,
        tokens_saved=sum(messages[index].token_count for index in dropped + to_summarize),
        over_budget=budget is not None and tokens_sent > budget,
        budget=budget,
        unpaired_ids=tuple(messages[index].id for index in unpaired),
    )


# --- strategies -------------------------------------------------------------------------------------------------


class OverflowStrategy:
    """Chooses which active messages of a conversation are sent to the model this turn."""

    name: ClassVar[str]

    def select(self, messages: Sequence[StoredMessage], config: OverflowConfig, *, fixed_tokens: int) -> Window:
        """Return the window to send and what to drop or summarise.

        `messages` are the conversation's active messages in order, with their stored token counts;
        `fixed_tokens` is what the system message and reply priming cost (see `fixed_tokens()`).
        """
        raise NotImplementedError

    def first_needed(self, meta: Sequence[tuple[str, int]], config: OverflowConfig, *, fixed_tokens: int) -> int:
        """Index of the oldest active message `select` could keep, from (role, token_count) pairs in order.

        Messages before it need not be loaded: they are dropped, and `select` on the rest gives the same window.
        The default, 0, loads everything.
        """
        return 0


class NoStrategy(OverflowStrategy):
    """Send everything (seed 4, 3.1); only messages no server accepts (unpaired tool messages) are left out."""

    name = STRATEGY_NONE

    def select(self, messages: Sequence[StoredMessage], config: OverflowConfig, *, fixed_tokens: int) -> Window:
        conversation = _partition(messages)
        # No budget: with this strategy an overflow is the model server's error to report.
        return _window(conversation, set(range(len(conversation.units))), fixed_tokens=fixed_tokens, budget=None)


class SlidingWindow(OverflowStrategy):
    """Keep the newest messages that fit in max_tokens less the reserve; drop the older ones (seed 4, 6.1)."""

    name = STRATEGY_SLIDING_WINDOW

    def first_needed(self, meta: Sequence[tuple[str, int]], config: OverflowConfig, *, fixed_tokens: int) -> int:
        # Once the newest messages (beyond the newest user message, always kept) pass the room, select() stops
        # inside them: nothing older can be chosen. Start on a unit boundary (a unit never begins with a tool
        # message) so the suffix groups exactly as the whole list does.
        room = _budget(config) - fixed_tokens
        newest_user = next((i for i in range(len(meta) - 1, -1, -1) if meta[i][0] == Role.USER), None)
        forced = meta[newest_user][1] if newest_user is not None else 0
        start, total = len(meta), 0
        while start > 0 and total <= room + forced:
            start -= 1
            total += meta[start][1]
        while start > 0 and meta[start][0] == Role.TOOL:
            start -= 1
        return start if newest_user is None else min(start, newest_user)

    def select(self, messages: Sequence[StoredMessage], config: OverflowConfig, *, fixed_tokens: int) -> Window:
        conversation = _partition(messages)
        budget = _budget(config)
        chosen, _used = _fit(conversation, first=0, room=budget - fixed_tokens)
        return _window(conversation, chosen, fixed_tokens=fixed_tokens, budget=budget)


class Summarize(OverflowStrategy):
    """Past summary_threshold messages or the token budget, mark the earliest messages for summary (seed 4, 5).

    The newest `summary_threshold` messages are kept (fewer when a tool-call group straddles the line: the group
    goes to the summary whole). Summarising happens later in a background task, so this turn sends what a sliding
    window would choose from the kept messages: the turn neither waits nor overflows. Kept messages that do not
    fit in the budget are marked for summary too, so that the context converges on what is actually sent.
    """

    name = STRATEGY_SUMMARIZE

    def select(self, messages: Sequence[StoredMessage], config: OverflowConfig, *, fixed_tokens: int) -> Window:
        conversation = _partition(messages)
        budget = _budget(config)
        units = conversation.units
        count = sum(unit.size for unit in units)
        if count <= config.summary_threshold and fixed_tokens + conversation.unit_tokens() <= budget:
            return _window(conversation, set(range(len(units))), fixed_tokens=fixed_tokens, budget=budget)
        first, kept = len(units), 0
        for position in range(len(units) - 1, -1, -1):
            # At least the newest unit is kept, even a tool-call group larger than the threshold.
            if kept + units[position].size > config.summary_threshold and first < len(units):
                break
            kept += units[position].size
            first = position
        chosen, _used = _fit(conversation, first=first, room=budget - fixed_tokens)
        return _window(conversation, chosen, fixed_tokens=fixed_tokens, budget=budget, summarize=True)


def _budget(config: OverflowConfig) -> int:
    if config.budget is None:  # only possible for "none"; OverflowConfig refuses it for the others
        raise OverflowConfigError("max_tokens", _("Set the maximum number of tokens for this strategy."))
    return config.budget


STRATEGIES: dict[str, type[OverflowStrategy]] = {
    strategy.name: strategy for strategy in (NoStrategy, SlidingWindow, Summarize)
}


def get_strategy(name: str) -> OverflowStrategy:
    """The strategy registered under `name` ("none", "sliding_window" or "summarize")."""
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise OverflowConfigError(
            "strategy", format_lazy(_("Unknown strategy; choose one of: {}."), ", ".join(STRATEGIES))
        ) from None


def select(messages: Sequence[StoredMessage], config: OverflowConfig, *, fixed_tokens: int) -> Window:
    """Run the configured strategy: the one call the runtime makes each turn."""
    return get_strategy(config.strategy).select(messages, config, fixed_tokens=fixed_tokens)


# --- what goes to the model -------------------------------------------------------------------------------------


def build_model_messages(
    *,
    system_prompt: str,
    summary: str | None,
    window: Window,
    recalled: Sequence[str] = (),
    documents: str = "",
    additions: Mapping[int, Addition] | None = None,
) -> list[ChatMessage]:
    """The chat request: exactly one system message, then the window's messages (with their `additions`, by id:
    the files they carry).

    The system message holds the agent's prompt, the summary, the recalled memories, the passages of the
    conversation's documents and, last, the content of any system messages stored in the window (runtime notes),
    merged in their order: several system messages, or one in the middle of the conversation, are rejected or
    ignored by some models (seed 0 asks for one). A stored system message's own token count covers its merged
    text, so the budget still holds.
    """
    notes = [message.content for message in window.messages if message.role == Role.SYSTEM]
    content = system_content(
        system_prompt=system_prompt, summary=summary, recalled=recalled, notes=notes, documents=documents
    )
    additions = additions or {}
    result = [ChatMessage.system(content)]
    result += [
        additions[message.id].message(message) if message.id in additions else message.chat_message()
        for message in window.messages
        if message.role != Role.SYSTEM
    ]
    return result


SUMMARY_INSTRUCTIONS = """\
You keep a running summary of a conversation between a user and an AI assistant. The summary replaces the \
earlier messages, so the assistant will only know what you write. Keep every name, number, date, amount, \
decision, preference, tool result that matters, and every question or task still open. Drop greetings and \
repetition. Write in the language the conversation uses, as short plain paragraphs or bullet points, at most \
about 300 words. Reply with the summary only.

你负责维护用户与AI助手之间对话的累积摘要。摘要将取代早期消息，助手之后只能看到你写下的内容。\
请保留所有人名、数字、日期、金额、决定、偏好、重要的工具结果，以及所有尚未解决的问题或任务；\
省略寒暄和重复内容。使用对话所用的语言，以简短段落或要点书写，不超过约300字（词）。只输出摘要本身。"""


def _transcript_line(message: StoredMessage, max_chars: int) -> str:
    text = message.content or ""
    if len(text) > max_chars:
        text = text[:max_chars] + " …[truncated / 已截断]"
    if message.call_ids:
        calls = "; ".join(
            f"{(call.get('function') or {}).get('name', '?')}({(call.get('function') or {}).get('arguments', '')})"
            for call in message.tool_calls or ()
        )
        return f"[assistant → tools] {calls}" + (f"\n{text}" if text else "")
    if message.role == Role.TOOL:
        return f"[tool result] {text}"
    return f"[{message.role}] {text}"


def summary_prompt(
    *, previous_summary: str | None, messages: Sequence[StoredMessage], max_chars_per_message: int = 4000
) -> list[ChatMessage]:
    """The request that makes (or extends) the summary: the first one summarises the early messages, later ones
    merge the newly summarised messages into the existing summary (seed 4, 5.1 step 3).

    Long messages (tool results, mostly) are cut to `max_chars_per_message` so the summary request fits too.
    """
    transcript = "\n\n".join(_transcript_line(message, max_chars_per_message) for message in messages)
    if previous_summary and previous_summary.strip():
        user = (
            f"Existing summary / 已有摘要:\n{previous_summary.strip()}\n\n"
            f"Newer messages to merge into it / 需要并入摘要的新消息:\n{transcript}\n\n"
            "Write the updated summary, keeping what still matters from the existing one. / "
            "请输出合并后的完整摘要，保留已有摘要中仍然重要的内容。"
        )
    else:
        user = (
            f"Messages to summarise / 需要摘要的消息:\n{transcript}\n\n"
            "Write the summary. / 请输出摘要。"
        )  # fmt: skip
    return [ChatMessage.system(SUMMARY_INSTRUCTIONS), ChatMessage.user(user)]
