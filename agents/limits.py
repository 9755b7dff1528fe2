"""How long one user message to an agent may be: the platform's limit, or less when the agent's model window is small.

A message must fit in the model's context window beside the system prompt, with the reply's reserve kept free (the
overflow configuration's reserve ratio). That room is in tokens; the composer counts characters, so the room becomes a
character bound that ordinary text never overruns (at most TOKENS_PER_CHARACTER tokens a character), and the socket
also counts a message's tokens with the project's tokenizer when its bytes could overrun the room.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.utils.translation import gettext as _

from agents.config import AgentConfig
from llm.tokens import TOKENS_PER_MESSAGE, count_text
from memory.overflow import fixed_tokens

# The platform's limit for one message, whatever the model (a 20,000-character message kept the demo model echoing
# for six minutes).
MAX_MESSAGE_CHARS = 20_000
# Tokens a character of ordinary text costs at most: English about 0.25, Chinese 1 to 2 (cl100k_base, o200k_base).
TOKENS_PER_CHARACTER = 2


@dataclass(frozen=True)
class MessageLimit:
    """The longest message an agent's conversation takes."""

    # What the composer counts and the socket checks first.
    chars: int
    # Room for the message in the model's window, in tokens (None: the window is unknown, the platform limit only).
    tokens: int | None = None
    # The window the room comes from (the model's, or the overflow configuration's maximum when smaller).
    window: int | None = None
    model: str = ""

    @property
    def model_name(self) -> str:
        return self.model or _("the model")

    @property
    def by_model(self) -> bool:
        """The model's window sets the limit (else the platform's limit does)."""
        return self.chars < MAX_MESSAGE_CHARS

    def refusal(self, text: str) -> str | None:
        """Why `text` is too long for this agent, in the active language (None: it fits)."""
        if len(text) > self.chars:
            return self.explanation()
        if self.tokens is not None and len(text.encode()) > self.tokens:
            # Bytes bound tokens from above (a BPE token is at least one byte): count only when they could overrun.
            tokens = count_text(text, self.model or "gpt-4")
            if tokens > self.tokens:
                return _(
                    "The message is %(tokens)s tokens, more than the %(room)s that %(model)s has room for after the "
                    "agent's instructions and the reply's reserve. Shorten it, or put long text in a knowledge base."
                ) % {"tokens": tokens, "room": self.tokens, "model": self.model_name}
        return None

    def explanation(self) -> str:
        """The limit and where it comes from, in the active language (the socket's refusal, the agent form's help)."""
        if not self.by_model:
            return _(
                "The message is longer than %(max)s characters. Shorten it, or put long text in a knowledge base."
            ) % {"max": self.chars}
        return _(
            "The message is longer than %(max)s characters, the most that %(model)s (a window of %(window)s tokens) "
            "takes after the agent's instructions and the reply's reserve. Shorten it, or put long text in a "
            "knowledge base."
        ) % {"max": self.chars, "model": self.model_name, "window": self.window}

    def help_text(self) -> str:
        """The limit as the agent pages state it."""
        if not self.by_model:
            return _("A message to this agent may be at most %(max)s characters (the platform's limit).") % {
                "max": self.chars
            }
        return _(
            "A message to this agent may be at most %(max)s characters: what %(model)s (a window of %(window)s "
            "tokens) has room for after the system prompt and the reply's reserve."
        ) % {"max": self.chars, "model": self.model_name, "window": self.window}


def message_limit(config: AgentConfig) -> MessageLimit:
    """The longest message `config` takes: the platform's limit, or what fits the model's window after the system
    prompt and the reply's reserve when that is less."""
    windows = [config.provider.context_window(config.model or None) if config.provider is not None else None]
    windows.append(config.overflow.max_tokens)
    known = [window for window in windows if window]
    if not known:
        return MessageLimit(chars=MAX_MESSAGE_CHARS, model=config.model)
    window = min(known)
    # As OverflowConfig.budget: the reserve kept for the reply; the epsilon keeps 8000 * 0.9 from flooring to 7199.
    budget = math.floor(window * (1 - config.overflow.reserve_ratio) + 1e-9)
    model = config.model or "gpt-4"
    system = fixed_tokens(system_prompt=config.system_prompt, summary=None, model=model)
    room = max(budget - system - TOKENS_PER_MESSAGE, 0)
    return MessageLimit(
        chars=min(MAX_MESSAGE_CHARS, room // TOKENS_PER_CHARACTER), tokens=room, window=window, model=config.model
    )
