"""The evaluation pages' forms: a dataset, a case with its expectation editor (one row per expectation, the fields of
each kind in KIND_FIELDS), an import, a run, the publish gate and a comparison. They parse what is typed; the
services (evals.services, evals.runner) decide and store."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.models import Agent, AgentVersion
from core.conf import setting
from evals.expectations import FIELDS, ExpectationError, validate
from evals.io import TURN_SEPARATOR, split_turns
from evals.models import Dataset, ExpectationKind, Run

# The fields each kind of expectation has (evals.expectations.FIELDS, the one declaration), in the editor's order: the
# form, the page script (which shows a row's fields for its kind) and the editing of a stored case read it.
KIND_FIELDS: dict[str, tuple[str, ...]] = {str(kind): tuple(fields) for kind, fields in FIELDS.items()}
JSON_FIELDS = ("schema", "arguments")
DRAFT = "draft"


def join_turns(turns: list[str]) -> str:
    return f"\n{TURN_SEPARATOR}\n".join(turns)


class DatasetForm(forms.ModelForm):
    class Meta:
        model = Dataset
        fields = ["name", "description", "judge_prompt"]
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
            "judge_prompt": forms.Textarea(attrs={"rows": 8, "class": "prompt-input"}),
        }


class CaseForm(forms.Form):
    title = forms.CharField(label=gettext_lazy("Title"), max_length=200, required=False)
    turns = forms.CharField(
        label=gettext_lazy("User turns"),
        widget=forms.Textarea(attrs={"rows": 5}),
        help_text=gettext_lazy(
            "What the user says, in order. Several turns: separate them with a line of three dashes (---). "
            "The expectations are checked on the reply to the last one."
        ),
    )

    def clean_turns(self) -> list[str]:
        turns = [turn for turn in split_turns(self.cleaned_data["turns"]) if turn]
        if not turns:
            raise ValidationError(_("Write at least one user turn."))
        return turns


class ExpectationForm(forms.Form):
    """One expectation: its kind and that kind's fields (KIND_FIELDS); `expectation` is the validated dict."""

    kind = forms.ChoiceField(
        label=gettext_lazy("The reply"), choices=[("", "—"), *ExpectationKind.choices], required=False
    )
    text = forms.CharField(label=gettext_lazy("Text"), required=False, widget=forms.Textarea(attrs={"rows": 2}))
    ignore_case = forms.BooleanField(label=gettext_lazy("Ignore case"), required=False, initial=True)
    pattern = forms.CharField(
        label=gettext_lazy("Regular expression"), required=False, help_text=gettext_lazy("Python syntax, searched.")
    )
    schema = forms.CharField(
        label=gettext_lazy("JSON Schema"), required=False, widget=forms.Textarea(attrs={"rows": 4})
    )
    name = forms.CharField(label=gettext_lazy("Tool name"), required=False)
    arguments = forms.CharField(
        label=gettext_lazy("Arguments it must contain (JSON object)"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    source = forms.CharField(
        label=gettext_lazy("Source name"),
        required=False,
        help_text=gettext_lazy("Empty: any knowledge source."),
    )
    rubric = forms.CharField(
        label=gettext_lazy("What a good reply does"), required=False, widget=forms.Textarea(attrs={"rows": 3})
    )
    min_score = forms.IntegerField(
        label=gettext_lazy("Lowest passing score (1-5)"), required=False, min_value=1, max_value=5, initial=4
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        kind = data.get("kind")
        self.expectation: dict[str, Any] | None = None
        if not kind or data.get("DELETE"):
            return data
        expectation: dict[str, Any] = {"kind": kind}
        for field in KIND_FIELDS[kind]:
            value = data.get(field)
            if field in JSON_FIELDS:
                if not (value or "").strip():
                    continue
                try:
                    value = json.loads(value)
                except ValueError as error:
                    self.add_error(field, _("This is not valid JSON: %(error)s") % {"error": error})
                    return data
            if value in (None, "") and field != "ignore_case":
                continue
            expectation[field] = value
        try:
            self.expectation = validate(expectation)
        except ExpectationError as error:
            field = getattr(error, "field", None)
            self.add_error(field if field in self.fields else None, error.message)
        return data


def expectation_initial(expectation: dict[str, Any]) -> dict[str, Any]:
    """A stored expectation as the editor's row shows it (JSON fields as indented JSON)."""
    initial: dict[str, Any] = {"kind": expectation.get("kind", "")}
    for field in KIND_FIELDS.get(expectation.get("kind", ""), ()):
        if field not in expectation:
            continue
        value = expectation[field]
        initial[field] = json.dumps(value, ensure_ascii=False, indent=2) if field in JSON_FIELDS else value
    return initial


class BaseExpectationFormSet(forms.BaseFormSet):
    def clean(self) -> None:
        if any(form.errors for form in self.forms):
            return
        if not self.expectations():
            raise ValidationError(_("Add at least one expectation: what the reply must show."))

    def expectations(self) -> list[dict[str, Any]]:
        return [form.expectation for form in self.forms if getattr(form, "expectation", None)]


ExpectationFormSet = forms.formset_factory(
    ExpectationForm, formset=BaseExpectationFormSet, extra=1, can_delete=True, max_num=50, validate_max=True
)


class ImportForm(forms.Form):
    file = forms.FileField(
        label=gettext_lazy("File"),
        help_text=gettext_lazy("CSV (with a header row) or JSONL (one case per line), UTF-8."),
    )


def version_choices(agent: Agent) -> list[tuple[str, str]]:
    """The versions a dataset runs against: the draft, then the published versions, newest first."""
    versions = AgentVersion.objects.filter(agent=agent).order_by("-number").values_list("pk", "number")
    return [(DRAFT, _("Draft (as it is now)")), *((str(pk), f"v{number}") for pk, number in versions)]


def max_concurrency() -> int:
    return int(setting("EVAL_MAX_CONCURRENCY"))


class RunForm(forms.Form):
    version = forms.ChoiceField(label=gettext_lazy("Version"))
    concurrency = forms.IntegerField(label=gettext_lazy("Cases at once"), min_value=1, initial=4)
    confirm_budget = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, agent: Agent, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent = agent
        self.fields["version"].choices = version_choices(agent)
        limit = max_concurrency()
        self.fields["concurrency"].max_value = limit
        self.fields["concurrency"].validators.append(MaxValueValidator(limit))
        self.fields["concurrency"].widget.attrs.update({"min": 1, "max": limit})
        self.fields["concurrency"].initial = min(4, limit)

    def chosen_version(self) -> AgentVersion | None:
        """The version chosen (None: the draft); a version of another agent is not among the choices."""
        chosen = self.cleaned_data["version"]
        return None if chosen == DRAFT else AgentVersion.objects.get(agent=self.agent, pk=int(chosen))


class GateForm(forms.Form):
    enabled = forms.BooleanField(label=gettext_lazy("Publish needs a passing run of the draft"), required=False)
    dataset = forms.ModelChoiceField(label=gettext_lazy("Dataset"), queryset=Dataset.objects.none(), required=False)
    threshold = forms.IntegerField(
        label=gettext_lazy("Pass rate needed (%)"),
        min_value=0,
        max_value=100,
        initial=80,
        help_text=gettext_lazy("And not below the published version's latest run on the same dataset."),
    )

    def __init__(self, *args: Any, agent: Agent, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["dataset"].queryset = Dataset.objects.filter(agent=agent).order_by("name")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("enabled") and not data.get("dataset"):
            self.add_error("dataset", _("Choose the dataset whose run the gate asks for."))
        return data


def run_label(run: Run) -> str:
    """A run as a choice reads: its number, version and pass rate."""
    version = f"v{run.version.number}" if run.version_id else _("draft")
    rate = f"{run.pass_rate:.0%}" if run.pass_rate is not None else "—"
    return f"#{run.pk} · {version} · {rate}"


class CompareForm(forms.Form):
    a = forms.ChoiceField(label=gettext_lazy("Run A"))
    b = forms.ChoiceField(label=gettext_lazy("Run B"))

    def __init__(self, *args: Any, runs: list[Run], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(str(run.pk), run_label(run)) for run in runs]
        self.fields["a"].choices = choices
        self.fields["b"].choices = choices
