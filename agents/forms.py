"""The agent form: token_overflow_config edited as readable fields rather than raw JSON (seed 4, section 7)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from agents.models import Agent
from memory.overflow import (
    DEFAULT_RESERVE_RATIO,
    DEFAULT_SUMMARY_THRESHOLD,
    MAX_RESERVE_RATIO,
    MIN_SUMMARY_THRESHOLD,
    STRATEGY_CHOICES,
    OverflowConfig,
    OverflowConfigError,
)

# The config key each form field edits.
OVERFLOW_FIELDS = {
    "strategy": "overflow_strategy",
    "max_tokens": "overflow_max_tokens",
    "reserve_ratio": "overflow_reserve_ratio",
    "summary_threshold": "overflow_summary_threshold",
}


class AgentForm(forms.ModelForm):
    overflow_strategy = forms.ChoiceField(
        label=_("token overflow strategy"),
        choices=[(value, label) for value, label, _help in STRATEGY_CHOICES],
        widget=forms.RadioSelect,
        initial="none",
        help_text=_(
            "No strategy: send every message. Sliding window: drop the oldest messages. "
            "Summarize: turn older messages into a summary. A change applies to new conversations only."
        ),
    )
    overflow_max_tokens = forms.IntegerField(
        label=_("maximum tokens"),
        required=False,
        min_value=1,
        help_text=_(
            "The model's context window, e.g. 8192 for GPT-4 (8K); required for the sliding window and summarize."
        ),
    )
    overflow_reserve_ratio = forms.FloatField(
        label=_("reserve ratio"),
        required=False,
        min_value=0,
        max_value=MAX_RESERVE_RATIO,
        initial=DEFAULT_RESERVE_RATIO,
        help_text=_("Share of the maximum kept free for the reply; 0.1 keeps 10%."),
    )
    overflow_summary_threshold = forms.IntegerField(
        label=_("summary threshold"),
        required=False,
        min_value=MIN_SUMMARY_THRESHOLD,
        initial=DEFAULT_SUMMARY_THRESHOLD,
        help_text=_("Summarize: past this many messages, the earliest ones are summarised."),
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
        ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            try:
                config = OverflowConfig.from_dict(self.instance.token_overflow_config).to_dict()
            except OverflowConfigError:
                config = {}
            for key, field in OVERFLOW_FIELDS.items():
                if config.get(key) is not None:
                    self.initial[field] = config[key]

    def clean(self):
        cleaned = super().clean()
        data = {key: cleaned.get(field) for key, field in OVERFLOW_FIELDS.items() if cleaned.get(field) is not None}
        if any(field in self.errors for field in OVERFLOW_FIELDS.values()):
            return cleaned
        try:
            self.instance.token_overflow_config = OverflowConfig.from_dict(data).to_dict()
        except OverflowConfigError as exc:
            self.add_error(OVERFLOW_FIELDS.get(exc.field), exc.message)
        return cleaned
