"""The evaluation admin (issue 39): datasets with their cases (each validated as evals.services validates it), runs
with their results (read-only: a run is written by the runner), publish gates, and an action on the feedback list
that makes evaluation cases from 👎 replies. Tenant admins see and touch their tenant's rows only
(tenants.admin.TenantOwnedAdmin); a row of another tenant answers as missing.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from evals.judge import DEFAULT_JUDGE_PROMPT
from evals.models import Case, CaseResult, Dataset, Gate, Run
from evals.services import case_from_feedback, clean_expectations, clean_turns
from memory.admin import FeedbackAdmin
from memory.models import Feedback
from tenants.admin import TenantOwnedAdmin, TenantOwnedAdminMixin


def _same_tenant(form: forms.ModelForm, field: str, *, tenant_id: int | None) -> None:
    """A related row chosen in `field` must be of the row's own tenant (a platform superuser may choose any)."""
    related = form.cleaned_data.get(field)
    if related is not None and tenant_id is not None and related.tenant_id != tenant_id:
        form.add_error(field, _("Choose one of this tenant's."))


class DatasetForm(forms.ModelForm):
    class Meta:
        model = Dataset
        fields = ["tenant", "agent", "name", "description", "judge_prompt"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        tenant = cleaned.get("tenant")
        _same_tenant(self, "agent", tenant_id=self.instance.tenant_id or (tenant.pk if tenant is not None else None))
        return cleaned


class CaseForm(forms.ModelForm):
    """A case as the services take it: at least one non-empty turn, every expectation valid (words naming it)."""

    class Meta:
        model = Case
        fields = ["position", "title", "turns", "expectations", "source"]

    # The services' cleaners raise errors keyed by field; a field's own clean method raises them unkeyed.
    def clean_turns(self) -> list[str]:
        try:
            return clean_turns(self.cleaned_data.get("turns"))
        except ValidationError as error:
            raise ValidationError(error.message_dict["turns"]) from error

    def clean_expectations(self) -> list[dict[str, Any]]:
        try:
            return clean_expectations(self.cleaned_data.get("expectations"))
        except ValidationError as error:
            raise ValidationError(error.message_dict["expectations"]) from error


class CaseInline(TenantOwnedAdminMixin, admin.StackedInline):
    model = Case
    form = CaseForm
    extra = 0
    fields = ["position", "title", "turns", "expectations", "source"]
    readonly_fields = ["source"]
    ordering = ["position", "id"]


@admin.register(Dataset)
class DatasetAdmin(TenantOwnedAdmin):
    form = DatasetForm
    inlines = [CaseInline]
    list_display = ["name", "agent", "case_count", "updated_at"]
    list_select_related = ["agent"]
    list_filter = ["agent"]
    search_fields = ["name", "description"]
    fields = ["tenant", "agent", "name", "description", "judge_prompt", "default_judge_prompt", "created_by",
              "created_at", "updated_at"]  # fmt: skip
    readonly_fields = ["default_judge_prompt", "created_by", "created_at", "updated_at"]

    @admin.display(description=gettext_lazy("cases"))
    def case_count(self, dataset: Dataset) -> int:
        return dataset.cases.count()

    @admin.display(description=gettext_lazy("default judge prompt"))
    def default_judge_prompt(self, dataset: Dataset) -> str:
        return DEFAULT_JUDGE_PROMPT

    def save_model(self, request: HttpRequest, obj: Dataset, form: forms.ModelForm, change: bool) -> None:
        if not change and request.user.is_authenticated:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


class ReadOnlyInline(TenantOwnedAdminMixin, admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CaseResultInline(ReadOnlyInline):
    model = CaseResult
    fields = ["position", "title", "status", "reply", "verdicts", "tokens_in", "tokens_out", "judge_tokens",
              "latency_ms", "conversation", "trace_id", "error"]  # fmt: skip
    readonly_fields = fields
    ordering = ["position", "id"]


@admin.register(Run)
class RunAdmin(TenantOwnedAdmin):
    """Runs, read-only (the runner writes them); deleting one removes its results."""

    inlines = [CaseResultInline]
    list_display = ["__str__", "agent", "version", "status", "done", "total", "passed", "failed", "errored", "tokens",
                    "created_at"]  # fmt: skip
    list_select_related = ["dataset", "agent", "version"]
    list_filter = ["status"]
    fields = ["dataset", "agent", "version", "status", "concurrency", "total", "done", "passed", "failed", "errored",
              "tokens", "judge_tokens", "stop_requested", "error", "started_by", "created_at", "started_at",
              "finished_at", "snapshot"]  # fmt: skip
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class GateForm(forms.ModelForm):
    class Meta:
        model = Gate
        fields = ["tenant", "agent", "enabled", "dataset", "threshold"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        agent, dataset, threshold = cleaned.get("agent"), cleaned.get("dataset"), cleaned.get("threshold")
        tenant = cleaned.get("tenant")
        _same_tenant(self, "agent", tenant_id=self.instance.tenant_id or (tenant.pk if tenant is not None else None))
        if agent is not None and dataset is not None and dataset.agent_id != agent.pk:
            self.add_error("dataset", _("The gate's dataset must be one of this agent's."))
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            self.add_error("threshold", _("The pass rate needed is a number from 0 to 1 (0.8 = 80%)."))
        if cleaned.get("enabled") and dataset is None:
            self.add_error("dataset", _("Choose the dataset whose run the gate asks for."))
        return cleaned


@admin.register(Gate)
class GateAdmin(TenantOwnedAdmin):
    form = GateForm
    list_display = ["agent", "enabled", "dataset", "threshold"]
    list_select_related = ["agent", "dataset"]


class FeedbackWithCasesAdmin(FeedbackAdmin):
    """memory's feedback list, with an action that makes evaluation cases from the selected 👎 replies."""

    actions = [*(FeedbackAdmin.actions or []), "make_eval_cases"]

    @admin.action(description=gettext_lazy("Make evaluation cases from the selected 👎 replies"))
    def make_eval_cases(self, request: HttpRequest, queryset: QuerySet[Feedback]) -> None:
        made, skipped = 0, 0
        for feedback in queryset.select_related("message__conversation__agent"):
            if feedback.rating != -1:
                skipped += 1
                continue
            try:
                case_from_feedback(feedback=feedback, user=request.user)
            except ValidationError as error:
                skipped += 1
                self.message_user(request, " ".join(error.messages), messages.WARNING)
                continue
            made += 1
        text = ngettext(
            "Made %(count)d evaluation case (in each agent's dataset “Feedback cases”).",
            "Made %(count)d evaluation cases (in each agent's dataset “Feedback cases”).",
            made,
        ) % {"count": made}
        if skipped:
            text += " " + ngettext(
                "%(count)d selected rating was skipped (only a 👎 reply becomes a case).",
                "%(count)d selected ratings were skipped (only a 👎 reply becomes a case).",
                skipped,
            ) % {"count": skipped}
        self.message_user(request, text, messages.SUCCESS if made else messages.WARNING)


admin.site.unregister(Feedback)
admin.site.register(Feedback, FeedbackWithCasesAdmin)
