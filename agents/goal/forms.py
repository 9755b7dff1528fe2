"""The form that starts a goal run: the goal and its limits, prefilled with the settings and bounded by them."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import MaxValueValidator
from django.utils.translation import gettext_lazy as _

from agents.goal.services import MAX_ANSWER_CHARS, MAX_GOAL_CHARS, LimitBounds


class GoalRunForm(forms.Form):
    goal = forms.CharField(
        label=_("goal"),
        max_length=MAX_GOAL_CHARS,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text=_("What the agent should achieve. It plans, remembers, works and asks you until it is done."),
    )
    max_iterations = forms.IntegerField(
        label=_("maximum iterations"), min_value=1, help_text=_("Model calls (each with its tool calls) in all.")
    )
    max_tokens_per_hour = forms.IntegerField(
        label=_("maximum tokens per hour"),
        min_value=1,
        help_text=_("Tokens of every model call of the run in any hour; the run ends when it reaches them."),
    )
    max_wall_seconds = forms.IntegerField(
        label=_("maximum wall time (seconds)"),
        min_value=1,
        help_text=_("Seconds from the start, waiting for you included."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, most in LimitBounds.from_settings().as_dict().items():
            field = self.fields[name]
            field.initial = most
            field.max_value = most
            field.widget.attrs.update({"min": 1, "max": most})
            field.validators.append(MaxValueValidator(most))
            field.help_text = _("%(help)s At most %(most)s.") % {"help": field.help_text, "most": most}


class GoalAnswerForm(forms.Form):
    answer = forms.CharField(
        label=_("your answer"), max_length=MAX_ANSWER_CHARS, widget=forms.Textarea(attrs={"rows": 3})
    )
