"""Agents (A1) and their published versions (A2)."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.text import slugify
from django.utils.translation import gettext_lazy as _

from agents.settings_table import SETTINGS
from agents.tools import find_tool, tool_refusal
from agents.workflows.schema import WorkflowValidationError, parse_workflow
from memory.overflow import STRATEGY_NONE, OverflowConfig, OverflowConfigError
from tenants.models import TenantOwned
from tenants.scope import current_tenant


def default_overflow_config() -> dict[str, Any]:
    return {"strategy": STRATEGY_NONE}


def agent_slug(*, tenant_id: int | None, name: str, exclude_pk: int | None = None) -> str:
    """A slug for an agent called `name`, free in its tenant: the name slugified (Chinese kept), then -2, -3..."""
    base = slugify(name, allow_unicode=True)[:120] or "agent"
    taken = set(
        Agent._base_manager.filter(tenant_id=tenant_id, slug__startswith=base)
        .exclude(pk=exclude_pk)
        .values_list("slug", flat=True)
    )
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}-{n}"
    return slug


class AgentKind(models.TextChoices):
    CHAT = "chat", _("chat")
    REACT = "react", _("ReAct tool agent")
    WORKFLOW = "workflow", _("workflow agent")
    PLANNER = "planner", _("planner")
    GOAL = "goal", _("long-lived goal agent")


# The keys of a version's snapshot (AgentVersion.snapshot): the settings a version freezes (agents.settings_table;
# one left out while at its default: max_reply_tokens), plus workflow_yaml for a workflow agent.
SNAPSHOT_FIELDS = SETTINGS.snapshot_keys

# The most an agent's longest reply may be set to, in tokens: above the largest output any current chat model
# writes in one reply (128K), so a real setting is never refused and a typo of a few extra digits is.
MAX_REPLY_TOKENS = 128_000
REPLY_TOKENS_TOO_FEW = _("Enter a whole number of tokens above 0, or leave the field empty for no limit.")
REPLY_TOKENS_TOO_MANY = _("The longest reply may be at most %(limit_value)s tokens.")


class MemoryExtraction(models.TextChoices):
    MODEL = "model", _("by the model (a separate call after each turn)")
    RULES = "rules", _("by rules (offline: one event per message, no model call)")
    COMBINED = "combined", _("with the reply (one call answers the reply and the events as JSON)")


class Agent(TenantOwned):
    """An agent's draft configuration; conversations use its latest published version, else this draft."""

    name = models.CharField(_("name"), max_length=120)
    slug = models.SlugField(
        _("API name"),
        max_length=140,
        allow_unicode=True,
        blank=True,
        help_text=_(
            "The name programs use for this agent (the `model` of the OpenAI-compatible API); made from the name "
            "when the agent is created and kept when it is renamed."
        ),
    )
    description = models.TextField(
        _("description"), blank=True, help_text=_("What the agent is good at; the planner reads it to pick agents.")
    )
    system_prompt = models.TextField(_("system prompt"), blank=True)
    provider = models.ForeignKey(
        "llm.ModelProvider",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("model provider"),
        help_text=_("Empty: the tenant's default provider."),
    )
    model = models.CharField(
        _("model"), max_length=200, blank=True, help_text=_("Empty: the provider's default chat model.")
    )
    temperature = models.FloatField(
        _("temperature"), default=0.7, validators=[MinValueValidator(0.0), MaxValueValidator(2.0)]
    )
    # Not token_overflow_config's max_tokens (the context window the overflow strategies fit the prompt into): the
    # `max_tokens` of each model call of a turn, which an API client's own max_tokens may lower but not raise.
    max_reply_tokens = models.PositiveIntegerField(
        _("Longest reply (tokens)"),
        null=True,
        blank=True,
        validators=[
            MinValueValidator(1, message=REPLY_TOKENS_TOO_FEW),
            MaxValueValidator(MAX_REPLY_TOKENS, message=REPLY_TOKENS_TOO_MANY),
        ],
        help_text=_(
            "The most tokens the model may write in one reply; a longer reply is cut there. Empty: no limit (the "
            "model's own). An API client's max_tokens may ask for less, never more."
        ),
    )
    kind = models.CharField(_("kind"), max_length=20, choices=AgentKind.choices, default=AgentKind.CHAT)
    tools = models.JSONField(
        _("tools"),
        default=list,
        blank=True,
        help_text=_("Names of the tools the agent may call; the model is offered these and no others."),
    )
    token_overflow_config = models.JSONField(
        _("token overflow"),
        default=default_overflow_config,
        blank=True,
        help_text=_("What happens when a conversation outgrows the model's context window."),
    )
    long_term_memory = models.BooleanField(
        _("long-term memory"),
        default=False,
        help_text=_(
            "Remember each user across conversations: events of every turn, memories the agent chooses to keep, "
            "and old turns of a long conversation, recalled into the next turns."
        ),
    )
    memory_extraction = models.CharField(
        _("event extraction"),
        max_length=10,
        choices=MemoryExtraction.choices,
        default=MemoryExtraction.MODEL,
        help_text=_(
            "How the events of a turn are found. By the model or by rules: after the reply, which never waits for "
            "them. With the reply: the model answers the reply and the events in one JSON object, and only the reply "
            "is shown."
        ),
    )
    knowledge_bases = models.ManyToManyField(
        "knowledge.KnowledgeBase",
        blank=True,
        related_name="agents",
        verbose_name=_("knowledge bases"),
        help_text=_("The agent answers from these with the knowledge-base tool and cites their documents."),
    )
    active = models.BooleanField(_("active"), default=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("agent")
        verbose_name_plural = _("agents")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="agents_agent_unique_name"),
            models.UniqueConstraint(
                fields=["tenant", "slug"], condition=~models.Q(slug=""), name="agents_agent_unique_slug"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        if not self.slug:
            self.slug = agent_slug(tenant_id=self.tenant_id or getattr(current_tenant(), "pk", None), name=self.name)
        super().save(*args, **kwargs)

    def clean(self) -> None:
        super().clean()

        if not isinstance(self.tools, list) or not all(isinstance(name, str) for name in self.tools):
            raise ValidationError({"tools": _("Give the tools as a list of tool names.")})
        tenant = self.tenant if self.tenant_id else current_tenant()
        unknown = [name for name in self.tools if find_tool(name, tenant=tenant) is None]
        if unknown:
            raise ValidationError({"tools": _("Unknown tools: %(names)s.") % {"names": ", ".join(unknown)}})
        refusals = [refusal for name in self.tools if (refusal := tool_refusal(name, tenant=tenant))]
        if refusals:
            # A pack's tool exists only where the platform operator enabled the pack (tenants.packs).
            raise ValidationError({"tools": refusals})
        try:
            self.token_overflow_config = OverflowConfig.from_dict(self.token_overflow_config).to_dict()
        except OverflowConfigError as exc:
            raise ValidationError({"token_overflow_config": exc.message}) from None

    def overflow_config(self) -> OverflowConfig:
        return OverflowConfig.from_dict(self.token_overflow_config)

    def snapshot(self) -> dict[str, Any]:
        """The whole draft configuration as JSON: what a version freezes and a conversation starts from."""
        data = SETTINGS.freeze(self)
        if self.kind == AgentKind.WORKFLOW:
            # A version freezes the workflow document too: editing the workflow later leaves ongoing
            # conversations on the one they started with (A2).
            data["workflow_yaml"] = Workflow.objects.filter(agent=self).values_list("yaml", flat=True).first()
        return data

    def published_version(self) -> AgentVersion | None:
        """The newest published version, or None while the agent is a draft only."""
        return self.versions.order_by("-number").first()


class AgentVersion(TenantOwned):
    """A published, frozen configuration of an agent; conversations keep the version they started with."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions", verbose_name=_("agent"))
    number = models.PositiveIntegerField(_("number"))
    snapshot = models.JSONField(_("configuration"), default=dict)
    published_at = models.DateTimeField(_("published"), auto_now_add=True)
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("published by"),
    )
    # The publish gate's decision that let this version through (agents.publishgate): the evaluation run and pass
    # rates it read, or {"required": false} when no gate was asked.
    gate = models.JSONField(_("publish gate"), default=dict, blank=True, editable=False)

    class Meta:
        ordering = ["agent", "-number"]
        verbose_name = _("agent version")
        verbose_name_plural = _("agent versions")
        constraints = [models.UniqueConstraint(fields=["agent", "number"], name="agents_version_unique_number")]

    def __str__(self) -> str:
        return f"{self.snapshot.get('name', self.agent_id)} v{self.number}"

    @property
    def token_overflow_config(self) -> dict[str, Any]:
        return self.snapshot.get("token_overflow_config") or default_overflow_config()


# Workflows (A7): YAML documents run by workflow agents, and the log of each run. Validation: agents.workflows.


class Workflow(TenantOwned):
    """A workflow document (seed 1's YAML), validated on save; a workflow agent runs the one bound to it."""

    name = models.CharField(_("name"), max_length=120)
    description = models.TextField(_("description"), blank=True)
    yaml = models.TextField(_("YAML"))
    agent = models.OneToOneField(
        Agent,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="workflow",
        verbose_name=_("workflow agent"),
        help_text=_("The workflow agent that runs this workflow as its turn."),
    )
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="agents_workflow_unique_name")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()

        try:
            parse_workflow(self.yaml, tenant=self.tenant if self.tenant_id else current_tenant())
        except WorkflowValidationError as exc:
            raise ValidationError({"yaml": [str(error) for error in exc.errors]}) from None


class WorkflowRunStatus(models.TextChoices):
    RUNNING = "running", _("running")
    COMPLETED = "completed", _("completed")
    INTERRUPTED = "interrupted", _("waiting for the user")
    FAILED = "failed", _("failed")
    STOPPED = "stopped", _("stopped")


class WorkflowRun(TenantOwned):
    """One run of a workflow: its inputs, result and a log entry per step (inputs, outputs, ms, error)."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="runs", verbose_name=_("workflow"))
    conversation = models.ForeignKey(
        "memory.Conversation",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("conversation"),
    )
    status = models.CharField(
        _("status"), max_length=20, choices=WorkflowRunStatus.choices, default=WorkflowRunStatus.RUNNING
    )
    inputs = models.JSONField(_("inputs"), default=dict, blank=True)
    outputs = models.JSONField(_("outputs"), default=dict, blank=True)
    log = models.JSONField(_("step log"), default=list, blank=True)
    error = models.TextField(_("error"), blank=True)
    started_at = models.DateTimeField(_("started"), auto_now_add=True)
    duration_ms = models.FloatField(_("duration (ms)"), default=0)

    class Meta:
        ordering = ["-started_at", "-id"]
        verbose_name = _("workflow run")
        verbose_name_plural = _("workflow runs")

    def __str__(self) -> str:
        return f"{self.workflow_id} · {self.status}"


class ToolHttpAllowedHost(TenantOwned):
    """A host the `http_request` tool may call for this tenant: a name, or "*.example.com" for its subdomains."""

    host = models.CharField(
        _("host"),
        max_length=253,
        help_text=_('A host name such as "api.example.com", or "*.example.com" for every subdomain of example.com.'),
    )
    note = models.CharField(_("note"), max_length=200, blank=True, help_text=_("What the agents use this host for."))
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["host"]
        verbose_name = _("allowed HTTP host")
        verbose_name_plural = _("allowed HTTP hosts")
        constraints = [models.UniqueConstraint(fields=["tenant", "host"], name="agents_httphost_unique_host")]

    def __str__(self) -> str:
        return self.host

    def clean(self) -> None:
        super().clean()

        host = (self.host or "").strip().lower().rstrip(".")
        wildcard = host.startswith("*.")
        name = host[2:] if wildcard else host
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            name = ""
        label = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
        if not re.fullmatch(rf"{label}(\.{label})*", name):
            raise ValidationError(
                {
                    "host": _(
                        'Give a host name only, such as "api.example.com" or "*.example.com" (no scheme, port or path).'
                    )
                }
            )
        self.host = f"*.{name}" if wildcard else name


# Seed 3's long-lived goal agent: its runs and their steps live in agents/goal/ (imported here so that Django finds
# them as models of this app).
from agents.goal.models import GoalRun, GoalStep  # noqa: E402, F401
