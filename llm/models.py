"""Model providers (per tenant) and the record of every model call."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from llm import crypto
from tenants.models import TenantOwned

DEMO_LABEL = "演示模型（离线脚本）/ Demo model (offline, scripted)"
DEMO_MODEL = "demo-scripted"


class ProviderKind(models.TextChoices):
    OPENAI = "openai", _("OpenAI-compatible server (OpenAI, DeepSeek, Qwen, Ollama, vLLM…)")
    DEMO = "demo", _("Demo model (offline, scripted)")


class Tier(models.TextChoices):
    """Model tiers of seed 3: a planner (M2), an executor (M1) and a deep-reasoning model (M0)."""

    PLANNING = "planning", _("planning")
    EXECUTION = "execution", _("execution")
    REASONING = "reasoning", _("reasoning")


class ModelProvider(TenantOwned):
    """A tenant's OpenAI-compatible model server: where it is, how to authenticate, which models it offers."""

    name = models.CharField(_("name"), max_length=120)
    kind = models.CharField(_("kind"), max_length=20, choices=ProviderKind.choices, default=ProviderKind.OPENAI)
    base_url = models.URLField(
        _("base URL"),
        max_length=300,
        blank=True,
        help_text=_("The OpenAI-compatible endpoint, ending in /v1 (e.g. https://api.deepseek.com/v1)."),
    )
    api_key_encrypted = models.TextField(_("API key (encrypted)"), blank=True, editable=False)
    chat_models = models.JSONField(
        _("chat models"),
        default=list,
        blank=True,
        help_text=_(
            'A list of {"name": ..., "context_window": tokens, "function_calling": true/false, "vision": true/false}, '
            'e.g. [{"name": "deepseek-chat", "context_window": 65536, "function_calling": true}]. "vision": the model '
            "sees images sent in conversations (without it, known names such as gpt-4o or qwen-vl are taken as "
            "vision models); other models get the text read from an image."
        ),
    )
    default_chat_model = models.CharField(_("default chat model"), max_length=200, blank=True)
    embedding_model = models.CharField(_("embedding model"), max_length=200, blank=True)
    planning_model = models.CharField(
        _("planning model"),
        max_length=200,
        blank=True,
        help_text=_("Seed 3's planner (M2); empty: the default chat model."),
    )
    execution_model = models.CharField(
        _("execution model"),
        max_length=200,
        blank=True,
        help_text=_("Seed 3's executor (M1); empty: the default chat model."),
    )
    reasoning_model = models.CharField(
        _("reasoning model"),
        max_length=200,
        blank=True,
        help_text=_("Seed 3's deep thinker (M0), used by the deep_think tool; empty: the default chat model."),
    )
    is_default = models.BooleanField(
        _("default provider"), default=False, help_text=_("Used when an agent names no provider.")
    )
    private_network_allowed = models.BooleanField(
        _("private network allowed"),
        default=False,
        help_text=_(
            "Let the base URL be a private or loopback address (a model server on the platform's own network, such "
            "as Ollama or vLLM). Only the platform operator can set this."
        ),
    )
    timeout_seconds = models.FloatField(
        _("timeout (seconds)"),
        default=60.0,
        validators=[MinValueValidator(0.05), MaxValueValidator(3600)],
        help_text=_("How long to wait for the server before giving up (connect, and each read of the stream)."),
    )
    max_retries = models.PositiveSmallIntegerField(
        _("retries"),
        default=2,
        validators=[MaxValueValidator(10)],
        help_text=_("Retries after a rate limit (429), a server error (5xx) or a connection error, with backoff."),
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["-is_default", "name"]
        verbose_name = _("model provider")
        verbose_name_plural = _("model providers")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="llm_provider_unique_name"),
            models.UniqueConstraint(
                fields=["tenant"], condition=models.Q(is_default=True), name="llm_provider_one_default"
            ),
        ]

    def __str__(self) -> str:
        return DEMO_LABEL if self.is_demo else self.name

    @property
    def is_demo(self) -> bool:
        return self.kind == ProviderKind.DEMO

    # The key goes in through set_api_key() and out through api_key(); nothing renders it.
    def set_api_key(self, plaintext: str) -> None:
        self.api_key_encrypted = crypto.encrypt(plaintext.strip())

    def api_key(self) -> str:
        return crypto.decrypt(self.api_key_encrypted)

    @property
    def has_api_key(self) -> bool:
        return bool(self.api_key_encrypted)

    def model_info(self, model: str) -> dict[str, Any]:
        """The chat_models entry of `model` ({} when the model is not listed)."""
        return next((m for m in self.chat_models or [] if isinstance(m, dict) and m.get("name") == model), {})

    def supports_function_calling(self, model: str | None = None) -> bool:
        return bool(self.model_info(model or self.default_chat_model).get("function_calling", True))

    def context_window(self, model: str | None = None) -> int | None:
        value = self.model_info(model or self.default_chat_model).get("context_window")
        return int(value) if value else None

    def model_for_tier(self, tier: str) -> str:
        """The model of a seed-3 tier, falling back to the default chat model."""
        field = {Tier.PLANNING: "planning_model", Tier.EXECUTION: "execution_model", Tier.REASONING: "reasoning_model"}[
            Tier(tier)
        ]
        return getattr(self, field) or self.default_chat_model

    def clean(self) -> None:
        super().clean()
        errors: dict[str, Any] = {}
        if self.kind == ProviderKind.OPENAI and not self.base_url:
            errors["base_url"] = _("An OpenAI-compatible provider needs a base URL, e.g. https://api.openai.com/v1.")
        names: list[str] = []
        if not isinstance(self.chat_models, list):
            errors["chat_models"] = _("Enter a list of models.")
        else:
            for entry in self.chat_models:
                if not isinstance(entry, dict) or not str(entry.get("name", "")).strip():
                    errors["chat_models"] = _(
                        'Each model needs a "name", e.g. {"name": "gpt-4o", "context_window": 128000}.'
                    )
                    break
                window = entry.get("context_window")
                if window is not None and (not isinstance(window, int) or window <= 0):
                    errors["chat_models"] = _(
                        "Model “%(name)s”: context_window must be a positive whole number of tokens."
                    ) % {"name": entry["name"]}
                    break
                names.append(entry["name"])
        if names:
            for field in ("default_chat_model", "planning_model", "execution_model", "reasoning_model"):
                value = getattr(self, field)
                if value and value not in names:
                    errors[field] = _("“%(model)s” is not one of the chat models listed above.") % {"model": value}
        if not self.default_chat_model:
            if names:
                self.default_chat_model = names[0]
            else:
                errors["default_chat_model"] = _("Name the default chat model (and list it under chat models).")
        if errors:
            raise ValidationError(errors)


class Purpose(models.TextChoices):
    CHAT = "chat", _("chat")
    SUMMARY = "summary", _("summary")
    PLAN = "plan", _("plan")
    EXTRACT = "extract", _("extract")
    EMBED = "embed", _("embed")
    JUDGE = "judge", _("evaluation judge")


class CallStatus(models.TextChoices):
    OK = "ok", _("ok")
    ERROR = "error", _("error")
    CANCELLED = "cancelled", _("cancelled")
    REFUSED = "refused", _("refused (quota)")


class UsageSource(models.TextChoices):
    PROVIDER = "provider", _("reported by the provider")
    COUNTED = "counted", _("counted with tiktoken")


class LLMCall(TenantOwned):
    """One model call: who made it, for what, how many tokens, how fast, and how it ended."""

    provider = models.ForeignKey(
        ModelProvider,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="calls",
        verbose_name=_("provider"),
    )
    # Plain indexed ids until agents and conversations exist (floor 1 cannot point up); they become FKs later.
    agent_id = models.BigIntegerField(_("agent id"), null=True, blank=True, db_index=True)
    conversation_id = models.BigIntegerField(_("conversation id"), null=True, blank=True, db_index=True)
    model = models.CharField(_("model"), max_length=200)
    purpose = models.CharField(_("purpose"), max_length=20, choices=Purpose.choices, default=Purpose.CHAT)
    prompt_tokens = models.PositiveIntegerField(_("prompt tokens"), default=0)
    completion_tokens = models.PositiveIntegerField(_("completion tokens"), default=0)
    total_tokens = models.PositiveIntegerField(_("total tokens"), default=0)
    usage_source = models.CharField(
        _("usage from"), max_length=10, choices=UsageSource.choices, default=UsageSource.PROVIDER
    )
    ttft_ms = models.PositiveIntegerField(_("time to first token (ms)"), null=True, blank=True)
    duration_ms = models.PositiveIntegerField(_("total time (ms)"), default=0)
    status = models.CharField(_("status"), max_length=10, choices=CallStatus.choices, default=CallStatus.OK)
    error_code = models.CharField(_("error code"), max_length=40, blank=True)
    finish_reason = models.CharField(_("finish reason"), max_length=40, blank=True)
    attempts = models.PositiveSmallIntegerField(_("attempts"), default=1)
    created_at = models.DateTimeField(_("time"), auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("model call")
        verbose_name_plural = _("model calls")
        indexes = [models.Index(fields=["tenant", "created_at"], name="llm_call_tenant_time")]

    def __str__(self) -> str:
        return f"{self.model} · {self.get_purpose_display()} · {self.total_tokens}"
