"""Conversations, their messages and context window (seed 4, section 4.1), and the overflow metrics (M4).

Memory sits below agents: agents are referenced by the string "agents.Agent", never imported.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from memory.overflow import STRATEGY_CHOICES, STRATEGY_NONE, StoredMessage
from tenants.models import TenantOwned


class Conversation(TenantOwned):
    """One user's conversation with one agent, pinned to the agent version (and strategy) it started with."""

    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="conversations", verbose_name=_("agent")
    )
    version = models.ForeignKey(
        "agents.AgentVersion",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="conversations",
        verbose_name=_("agent version"),
        help_text=_("Empty: started from the unpublished draft."),
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("user")
    )
    provider = models.ForeignKey(
        "llm.ModelProvider",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("model provider"),
    )
    model = models.CharField(
        _("model"), max_length=200, blank=True, help_text=_("The model whose tokenizer counts this conversation.")
    )
    title = models.CharField(_("title"), max_length=200, blank=True)
    # A plan step's own conversation (the step agent's memory) points at the conversation whose plan it serves: it
    # is internal, never listed or opened as the user's chat; administrators reach it from the plan log.
    parent = models.ForeignKey(
        "self",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="children",
        verbose_name=_("parent conversation"),
        help_text=_("Set for a plan step's internal conversation: the conversation whose plan it serves."),
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")

    def __str__(self) -> str:
        return self.title or str(_("Conversation %(id)s")) % {"id": self.pk}

    @property
    def memory_key(self) -> str:
        """Seed 0's memory key {agent}_{user}_{conversation}: agents never share memory."""
        return f"{self.agent_id}_{self.user_id}_{self.pk}"


class Role(models.TextChoices):
    SYSTEM = "system", _("system")
    USER = "user", _("user")
    ASSISTANT = "assistant", _("assistant")
    TOOL = "tool", _("tool")


class MessageStatus(models.TextChoices):
    COMPLETE = "complete", _("complete")
    PARTIAL = "partial", _("partial")
    ERROR = "error", _("error")


class Message(TenantOwned):
    """One stored message; its token count is computed once, when it is created."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages", verbose_name=_("conversation")
    )
    role = models.CharField(_("role"), max_length=10, choices=Role.choices)
    content = models.TextField(_("content"), blank=True)
    tool_calls = models.JSONField(_("tool calls"), null=True, blank=True)
    tool_call_id = models.CharField(_("tool call id"), max_length=200, blank=True)
    token_count = models.PositiveIntegerField(_("tokens"), default=0)
    client_id = models.CharField(
        _("client id"), max_length=100, null=True, blank=True, help_text=_("Makes a resent message idempotent.")
    )
    status = models.CharField(_("status"), max_length=10, choices=MessageStatus.choices, default=MessageStatus.COMPLETE)
    error_code = models.CharField(_("error code"), max_length=60, blank=True)
    usage = models.JSONField(_("usage"), null=True, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["conversation", "id"]
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        # A conversation's messages are read as a range of ids (the active suffix): one index serves it in order.
        indexes = [models.Index(fields=["conversation", "id"], name="memory_message_conv_id")]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "client_id"],
                condition=models.Q(client_id__isnull=False),
                name="memory_message_unique_client_id",
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_role_display()}: {self.content[:60]}"

    def stored(self) -> StoredMessage:
        return StoredMessage(
            id=self.pk,
            role=self.role,
            content=self.content,
            tool_calls=self.tool_calls,
            tool_call_id=self.tool_call_id or None,
            token_count=self.token_count,
        )


class ConversationContext(TenantOwned):
    """What the model sees of a conversation: the frozen strategy, the summary and the active message ids."""

    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, related_name="context", verbose_name=_("conversation")
    )
    strategy = models.CharField(
        _("strategy"),
        max_length=20,
        choices=[(value, label) for value, label, _help in STRATEGY_CHOICES],
        default=STRATEGY_NONE,
    )
    strategy_config = models.JSONField(
        _("strategy configuration"), default=dict, help_text=_("The agent's setting when the conversation started.")
    )
    summary = models.TextField(_("summary"), blank=True)
    active_messages = models.JSONField(_("active messages"), default=list)
    summarized_through = models.BigIntegerField(_("summarised through message"), null=True, blank=True)
    summary_pending = models.BooleanField(_("summary pending"), default=False)
    summary_queued_at = models.DateTimeField(_("summary queued"), null=True, blank=True)
    tool_context = models.JSONField(
        _("tool context"),
        default=dict,
        blank=True,
        help_text=_("What tools returned as context (A5); passed to later tools, never prompted."),
    )
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("conversation context")
        verbose_name_plural = _("conversation contexts")

    def __str__(self) -> str:
        return str(_("Context of %(conversation)s")) % {"conversation": self.conversation_id}


class OverflowMetric(TenantOwned):
    """Per agent and day: how often the overflow strategy acted, and what it saved (M4)."""

    agent_id = models.BigIntegerField(_("agent id"), db_index=True)
    day = models.DateField(_("day"))
    triggers = models.PositiveIntegerField(_("strategy triggers"), default=0)
    summaries_made = models.PositiveIntegerField(_("summaries made"), default=0)
    summaries_failed = models.PositiveIntegerField(_("summaries failed"), default=0)
    tokens_saved = models.PositiveBigIntegerField(_("tokens saved"), default=0)

    class Meta:
        ordering = ["-day", "agent_id"]
        verbose_name = _("overflow metric")
        verbose_name_plural = _("overflow metrics")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "agent_id", "day"], name="memory_overflow_metric_unique_day")
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.day}"
