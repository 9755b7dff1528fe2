"""The agent form: token_overflow_config edited as readable fields rather than raw JSON (seed 4, section 7).

One form for the admin (AgentForm, with the tenant field for platform superusers) and the agent pages
(AgentConfigForm, the same fields and checks without the tenant field).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from django import forms
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from agents.models import MAX_REPLY_TOKENS, REPLY_TOKENS_TOO_FEW, REPLY_TOKENS_TOO_MANY, Agent, MemoryExtraction
from agents.services import EDITABLE_FIELDS
from agents.tools import all_tools, get_tool, tools_available
from llm.models import ModelProvider
from llm.selectors import default_provider
from memory.overflow import (
    DEFAULT_RESERVE_RATIO,
    DEFAULT_SUMMARY_THRESHOLD,
    MAX_RESERVE_RATIO,
    MIN_EXCHANGE_TOKENS,
    MIN_SUMMARY_THRESHOLD,
    MODEL_PRESETS,
    STRATEGY_CHOICES,
    STRATEGY_NONE,
    STRATEGY_SLIDING_WINDOW,
    STRATEGY_SUMMARIZE,
    OverflowConfig,
    OverflowConfigError,
    fixed_tokens,
)
from tenants.models import Tenant
from tenants.scope import current_tenant

# The config key each form field edits.
OVERFLOW_FIELDS = {
    "strategy": "overflow_strategy",
    "max_tokens": "overflow_max_tokens",
    "reserve_ratio": "overflow_reserve_ratio",
    "summary_threshold": "overflow_summary_threshold",
}

# Seed 4, 7.3: one line under each strategy's radio button.
STRATEGY_EXPLANATIONS: dict[str, Promise] = {
    STRATEGY_NONE: _("No processing at all; the conversation may exceed the model's limit and fail."),
    STRATEGY_SLIDING_WINDOW: _("Removes old messages automatically and keeps the newest content."),
    STRATEGY_SUMMARIZE: _("Turns old messages into a summary and keeps the key information."),
}

# Which strategies each token-management field belongs to (the page shows only those; without JS, all).
FIELD_STRATEGIES: dict[str, tuple[str, ...]] = {
    "overflow_max_tokens": (STRATEGY_SLIDING_WINDOW, STRATEGY_SUMMARIZE),
    "overflow_preset": (STRATEGY_SLIDING_WINDOW, STRATEGY_SUMMARIZE),
    "overflow_reserve_ratio": (STRATEGY_SLIDING_WINDOW, STRATEGY_SUMMARIZE),
    "overflow_summary_threshold": (STRATEGY_SUMMARIZE,),
}

PRESET_TOKENS = {key: tokens for key, _label, tokens in MODEL_PRESETS}

# What the pages pass to the services (agent_create / agent_update): what they may edit, less the name (passed
# on its own) and the overflow configuration (built from the form's own fields).
SERVICE_FIELDS = tuple(name for name in EDITABLE_FIELDS if name not in ("name", "token_overflow_config"))


@dataclass(frozen=True)
class StrategyOption:
    """One strategy radio button with its explanation, for the template."""

    radio: Any
    value: str
    explanation: Promise


@dataclass(frozen=True)
class ModelOption:
    """A chat model the tenant's providers offer (the model field's suggestions)."""

    name: str
    provider: str
    context_window: int | None


def tool_choices(tenant: Tenant | None) -> list[tuple[str, str]]:
    """The tools `tenant` may use as checkbox choices: name, and description in the active language. Without a
    tenant (a platform superuser adding an agent in the admin, the tenant not chosen yet) every registered tool;
    Agent.clean then refuses a pack's tool the chosen tenant does not have."""

    tools = tools_available(tenant) if tenant is not None else all_tools()
    return [(tool.name, f"{tool.label()} — {tool.description()}") for tool in tools]


class AgentForm(forms.ModelForm):
    tools = forms.MultipleChoiceField(
        label=_("tools"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("The tools the agent may call; the model is offered these and no others."),
    )
    # Declared here for its messages: the model field's form field would say Django's own for a negative number.
    max_reply_tokens = forms.IntegerField(
        label=Agent._meta.get_field("max_reply_tokens").verbose_name,
        required=False,
        min_value=1,
        max_value=MAX_REPLY_TOKENS,
        error_messages={"min_value": REPLY_TOKENS_TOO_FEW, "max_value": REPLY_TOKENS_TOO_MANY},
        help_text=Agent._meta.get_field("max_reply_tokens").help_text,
    )
    overflow_strategy = forms.ChoiceField(
        label=_("token overflow strategy"),
        choices=[(value, label) for value, label, _help in STRATEGY_CHOICES],
        widget=forms.RadioSelect,
        initial=STRATEGY_NONE,
        help_text=_("What happens when a conversation outgrows the model's context window. "
                    "A change applies to new conversations only; ongoing ones keep their strategy."),
    )  # fmt: skip
    overflow_preset = forms.ChoiceField(
        label=_("common presets"),
        required=False,
        choices=[("", _("— choose a model —")), *[(key, label) for key, label, _tokens in MODEL_PRESETS]],
        help_text=_("Fills the maximum tokens with a well-known model's context window."),
    )
    overflow_max_tokens = forms.IntegerField(
        label=_("maximum tokens"),
        required=False,
        min_value=1,
        help_text=_(
            "The model's context window, e.g. 8192 for GPT-4 (8K); required for the sliding window and summarize, "
            "at most the chosen model's window, and at least what one exchange needs: the system prompt, a short "
            "message and the reply's reserve."
        ),
    )
    overflow_reserve_ratio = forms.FloatField(
        label=_("reserve ratio"),
        required=False,
        min_value=0,
        max_value=MAX_RESERVE_RATIO,
        initial=DEFAULT_RESERVE_RATIO,
        widget=forms.NumberInput(attrs={"step": "0.05"}),
        help_text=_("Share of the maximum kept free for the reply, from 0 to 0.5; 0.1 keeps 10%."),
    )
    overflow_summary_threshold = forms.IntegerField(
        label=_("summary threshold"),
        required=False,
        min_value=MIN_SUMMARY_THRESHOLD,
        initial=DEFAULT_SUMMARY_THRESHOLD,
        help_text=_("Summarize: past this many messages, the earliest ones are summarised (at least 2)."),
    )

    class Meta:
        model = Agent
        fields = [
            "tenant",
            "name",
            "description",
            "kind",
            "active",
            "system_prompt",
            "provider",
            "model",
            "temperature",
            "max_reply_tokens",
            "tools",
            "long_term_memory",
            "memory_extraction",
            "knowledge_bases",
        ]
        widgets = {"knowledge_bases": forms.CheckboxSelectMultiple}

    def __init__(self, *args, tenant: Tenant | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.fields["tools"].choices = tool_choices(self._tenant())
        if "memory_extraction" in self.fields:
            self.fields["memory_extraction"].required = False  # left out: by the model
        if self.instance.pk:
            try:
                config = OverflowConfig.from_dict(self.instance.token_overflow_config).to_dict()
            except OverflowConfigError:
                config = {}
            for key, field in OVERFLOW_FIELDS.items():
                if config.get(key) is not None:
                    self.initial[field] = config[key]

    def clean_memory_extraction(self) -> str:
        return self.cleaned_data.get("memory_extraction") or MemoryExtraction.MODEL

    # --- the tenant's providers and models ----------------------------------------------------------------------

    def _tenant(self) -> Tenant | None:
        if self.tenant is not None:
            return self.tenant
        if self.instance.tenant_id:
            return self.instance.tenant
        chosen = getattr(self, "cleaned_data", {}).get("tenant")
        return chosen or current_tenant()

    def _default_provider(self):
        tenant = self._tenant()
        return default_provider(tenant=tenant) if tenant is not None else None

    def context_window(self, provider, model: str) -> int | None:
        """The context window the tenant's provider lists for `model` (None when unknown)."""
        provider = provider or self._default_provider()
        if provider is None:
            return None
        return provider.context_window(model or None)

    # --- validation ---------------------------------------------------------------------------------------------

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("overflow_max_tokens") is None and cleaned.get("overflow_preset"):
            # Without JavaScript the preset cannot fill the field in the page: apply it here.
            cleaned["overflow_max_tokens"] = PRESET_TOKENS[cleaned["overflow_preset"]]
        if any(field in self.errors for field in OVERFLOW_FIELDS.values()):
            return cleaned
        data = {key: cleaned.get(field) for key, field in OVERFLOW_FIELDS.items() if cleaned.get(field) is not None}
        try:
            config = OverflowConfig.from_dict(data)
        except OverflowConfigError as exc:
            self.add_error(OVERFLOW_FIELDS.get(exc.field), exc.message)
            return cleaned
        self._check_context_window(config, cleaned)
        self._check_room_for_an_exchange(config, cleaned)
        self.instance.token_overflow_config = config.to_dict()
        return cleaned

    def _check_room_for_an_exchange(self, config: OverflowConfig, cleaned: dict[str, Any]) -> None:
        """The budget must hold the system prompt and a short exchange, or every turn goes out over it (a budget of
        10 tokens was accepted and the chat then sent 13 without a word)."""
        if config.budget is None or "overflow_max_tokens" in self.errors:
            return
        provider = cleaned.get("provider") or self._default_provider()
        model = cleaned.get("model") or (provider.default_chat_model if provider else "") or "gpt-4"
        system = fixed_tokens(system_prompt=cleaned.get("system_prompt") or "", summary=None, model=model)
        needed = system + MIN_EXCHANGE_TOKENS
        if config.budget < needed:
            least = math.ceil(needed / (1 - config.reserve_ratio))
            self.add_error(
                "overflow_max_tokens",
                _(
                    "%(max)s tokens leave %(budget)s after the reply's reserve, but the system prompt alone takes "
                    "%(system)s and a short message needs about %(message)s more: enter at least %(least)s."
                )
                % {"max": config.max_tokens, "budget": config.budget, "system": system,
                   "message": MIN_EXCHANGE_TOKENS, "least": least},
            )  # fmt: skip

    def _check_context_window(self, config: OverflowConfig, cleaned: dict[str, Any]) -> None:
        if config.max_tokens is None or "provider" in self.errors or "model" in self.errors:
            return
        provider = cleaned.get("provider") or self._default_provider()
        model = cleaned.get("model") or (provider.default_chat_model if provider else "")
        window = self.context_window(provider, model)
        if window is not None and config.max_tokens > window:
            self.add_error(
                "overflow_max_tokens",
                _("%(max)s tokens is more than %(model)s can take (%(window)s tokens): enter at most %(window)s.")
                % {"max": config.max_tokens, "model": model, "window": window},
            )

    # --- for the pages ------------------------------------------------------------------------------------------

    def strategy_options(self) -> list[StrategyOption]:
        return [
            StrategyOption(
                radio=radio, value=radio.data["value"], explanation=STRATEGY_EXPLANATIONS[radio.data["value"]]
            )
            for radio in self["overflow_strategy"]
        ]

    def overflow_fields(self) -> list[tuple[Any, str]]:
        """The strategy-dependent fields with the strategies they belong to (space-separated, for the script)."""
        return [(self[name], " ".join(strategies)) for name, strategies in FIELD_STRATEGIES.items()]

    def tool_rows(self) -> list[tuple[Any, str, str, str, str, str]]:
        """The tools field as table rows: (its checkbox, the tool's name, its label and what it does in the active
        language, the MCP server it comes from or "", its input schema as JSON for an MCP tool or "")."""
        tenant = self._tenant()
        known = {tool.name: tool for tool in (tools_available(tenant) if tenant is not None else all_tools())}
        rows = []
        for checkbox in self["tools"]:
            name = checkbox.data["value"]
            tool = known.get(name) or get_tool(name)
            group = tool.group if tool else ""
            schema = json.dumps(tool.parameters, ensure_ascii=False, indent=1) if group else ""
            label, description = (tool.label(), tool.description()) if tool else (name, "")
            rows.append((checkbox, name, label, description, group, schema))
        return rows

    def preset_tokens(self) -> dict[str, int]:
        return dict(PRESET_TOKENS)

    def model_options(self) -> list[ModelOption]:
        tenant = self._tenant()
        if tenant is None:
            return []
        options = []
        for provider in ModelProvider.objects.filter(tenant=tenant):
            for info in provider.chat_models or []:
                if isinstance(info, dict) and info.get("name"):
                    options.append(
                        ModelOption(
                            name=info["name"], provider=str(provider), context_window=info.get("context_window")
                        )
                    )
        return options

    def service_fields(self) -> dict[str, Any]:
        """The cleaned input as keyword arguments of agent_create / agent_update."""
        fields = {name: self.cleaned_data[name] for name in SERVICE_FIELDS if name in self.cleaned_data}
        fields["token_overflow_config"] = self.instance.token_overflow_config
        return fields


class AgentConfigForm(AgentForm):
    """The agent pages' form: the admin's fields and checks, in the active tenant (no tenant field)."""

    class Meta(AgentForm.Meta):
        fields = [name for name in AgentForm.Meta.fields if name != "tenant"]

    def __init__(self, *args, tenant: Tenant, **kwargs) -> None:
        super().__init__(*args, tenant=tenant, **kwargs)
        if not self.instance.tenant_id:
            self.instance.tenant = tenant
        provider_field = self.fields["provider"]
        default = self._default_provider()
        provider_field.empty_label = _("The tenant's default provider")
        if not self.instance.pk and default is not None:
            self.initial.setdefault("provider", default.pk)
            window = default.context_window()
            if window:
                # Seed 4, 7.1: the maximum defaults to the model's own window.
                self.initial.setdefault("overflow_max_tokens", window)
        self.fields["model"].widget.attrs["list"] = "model-options"
