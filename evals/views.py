"""The evaluation pages (docs/evaluation.md, "Pages and API"): an agent's datasets, a dataset with its cases, import,
export and runs, a run with its live progress and results, two runs compared, the publish gate, and the chat's
"make a test case" button on a 👎 reply. Owners and admins only: members get the explanation page; another tenant's
agent, dataset, case or run is a 404 (the request's tenant scope finds nothing)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.models import Agent
from agents.sections import AgentSection, register_agent_section
from agents.selectors import agent_get
from evals import selectors
from evals.compare import compare, latest_runs
from evals.expectations import ExpectationError
from evals.forms import (
    KIND_FIELDS,
    CaseForm,
    CompareForm,
    DatasetForm,
    ExpectationFormSet,
    GateForm,
    ImportForm,
    RunForm,
    expectation_initial,
    join_turns,
)
from evals.io import export_csv, export_jsonl
from evals.judge import DEFAULT_JUDGE_PROMPT
from evals.models import Case, Dataset, ExpectationKind, Gate, ResultStatus, Run, RunStatus
from evals.runner import BudgetWarning, RunRefused, run_progress, run_start, run_stop
from evals.services import (
    case_create,
    case_delete,
    case_from_feedback,
    case_update,
    cases_import,
    dataset_create,
    dataset_delete,
    dataset_update,
    gate_update,
)
from memory.links import conversation_page, conversation_page_registered
from tenants.decorators import administrators_only, may_administer

admins_only = administrators_only("evals/forbidden.html")
EXPORTS = {"jsonl": ("application/x-ndjson", export_jsonl), "csv": ("text/csv", export_csv)}


# --- access ---------------------------------------------------------------------------------------------------


def _agent_or_404(agent_id: int) -> Agent:
    try:
        return agent_get(agent_id=agent_id)
    except Agent.DoesNotExist:
        raise Http404(_("No such agent in this tenant.")) from None


def _dataset_or_404(dataset_id: int) -> Dataset:
    try:
        return selectors.access_dataset(dataset_id=dataset_id)
    except Dataset.DoesNotExist:
        raise Http404(_("No such dataset in this tenant.")) from None


def _case_or_404(case_id: int) -> Case:
    try:
        return selectors.access_case(case_id=case_id)
    except Case.DoesNotExist:
        raise Http404(_("No such case in this tenant.")) from None


def _run_or_404(run_id: Any) -> Run:
    try:
        return selectors.access_run(run_id=int(run_id))
    except (Run.DoesNotExist, TypeError, ValueError):
        raise Http404(_("No such run in this tenant.")) from None


def _errors_onto(form: Any, error: ValidationError | ExpectationError) -> None:
    """A service's refusal shown on the form: on its field when it names one the form has, else above it."""
    if isinstance(error, ValidationError) and hasattr(error, "error_dict"):
        for field, problems in error.message_dict.items():
            form.add_error(field if field in form.fields else None, problems)
        return
    field = getattr(error, "field", None)
    words = error.messages if isinstance(error, ValidationError) else [error.message]
    form.add_error(field if field in form.fields else None, words)


# --- datasets ---------------------------------------------------------------------------------------------------


@admins_only
@require_GET
def dataset_list(request: HttpRequest, agent_id: int) -> HttpResponse:
    """The agent's datasets, the latest run per version and the publish gate."""
    agent = _agent_or_404(agent_id)
    return render(
        request,
        "evals/datasets.html",
        {
            "agent": agent,
            "datasets": selectors.datasets_of_agent(agent=agent),
            "latest": latest_runs(agent),
            "gate": Gate.objects.filter(agent=agent).select_related("dataset").first(),
        },
    )


@admins_only
@require_http_methods(["GET", "POST"])
def dataset_new(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = _agent_or_404(agent_id)
    form = DatasetForm(request.POST or None)
    del form.fields["judge_prompt"]  # shown (with the default) once the dataset exists
    if request.method == "POST" and form.is_valid():
        try:
            dataset = dataset_create(
                agent=agent, name=form.cleaned_data["name"], description=form.cleaned_data["description"],
                user=request.user,
            )  # fmt: skip
        except ValidationError as error:
            _errors_onto(form, error)
        else:
            messages.success(request, _("Created the dataset “%(name)s”. Add its cases.") % {"name": dataset.name})
            return HttpResponseRedirect(reverse("evals:dataset", args=[dataset.pk]))
    return render(request, "evals/dataset_form.html", {"form": form, "agent": agent, "dataset": None})


@admins_only
@require_http_methods(["GET", "POST"])
def dataset_edit(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """Name, description and the judge's prompt (shown with the default filled in when none was set)."""
    dataset = _dataset_or_404(dataset_id)
    initial = {"judge_prompt": dataset.judge_prompt or DEFAULT_JUDGE_PROMPT}
    form = DatasetForm(request.POST or None, initial=initial, instance=dataset)
    if request.method == "POST" and form.is_valid():
        prompt = form.cleaned_data["judge_prompt"].strip()
        try:
            dataset_update(
                dataset=dataset, name=form.cleaned_data["name"], description=form.cleaned_data["description"],
                judge_prompt="" if prompt == DEFAULT_JUDGE_PROMPT.strip() else prompt,
            )  # fmt: skip
        except ValidationError as error:
            _errors_onto(form, error)
        else:
            messages.success(request, _("Saved the dataset."))
            return HttpResponseRedirect(reverse("evals:dataset", args=[dataset.pk]))
    return render(
        request, "evals/dataset_form.html", {"form": form, "agent": dataset.agent, "dataset": dataset}
    )  # fmt: skip


def _dataset_context(dataset: Dataset, **extra: Any) -> dict[str, Any]:
    runs = selectors.runs_of_dataset(dataset=dataset)
    context = {
        "dataset": dataset,
        "agent": dataset.agent,
        "cases": selectors.cases_of_dataset(dataset=dataset),
        "runs": runs,
        "judge_prompt": dataset.judge_prompt or DEFAULT_JUDGE_PROMPT,
        "judge_prompt_default": not dataset.judge_prompt,
        "kinds": dict(ExpectationKind.choices),
        "import_form": ImportForm(),
        "run_form": RunForm(agent=dataset.agent),
        "compare_form": CompareForm(runs=runs, initial=_compare_initial(runs)) if len(runs) > 1 else None,
    }
    context.update(extra)
    return context


def _compare_initial(runs: list[Run]) -> dict[str, str]:
    """The two runs a dataset page offers to compare first: the newest of the draft and the newest of a published
    version, else the two newest."""
    draft = next((run for run in runs if run.version_id is None and run.finished), None)
    published = next((run for run in runs if run.version_id is not None and run.finished), None)
    a, b = (published, draft) if draft and published else (runs[1], runs[0])
    return {"a": str(a.pk), "b": str(b.pk)}


@admins_only
@require_GET
def dataset_detail(request: HttpRequest, dataset_id: int) -> HttpResponse:
    return render(request, "evals/dataset.html", _dataset_context(_dataset_or_404(dataset_id)))


@admins_only
@require_http_methods(["GET", "POST"])
def dataset_delete_view(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """Asks first; deleting takes its cases and runs with it."""
    dataset = _dataset_or_404(dataset_id)
    if request.method == "POST":
        agent_id = dataset.agent_id
        dataset_delete(dataset=dataset)
        messages.success(request, _("Deleted the dataset “%(name)s”.") % {"name": dataset.name})
        return HttpResponseRedirect(reverse("evals:datasets", args=[agent_id]))
    return render(
        request,
        "evals/confirm.html",
        {
            "agent": dataset.agent, "dataset": dataset, "what": "dataset",
            "case_count": dataset.cases.count(), "run_count": dataset.runs.count(),
            "cancel_url": reverse("evals:dataset", args=[dataset.pk]),
        },
    )  # fmt: skip


@admins_only
@require_POST
def dataset_import(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """Cases from a CSV or JSONL file: all or none; the problems are listed by line."""
    dataset = _dataset_or_404(dataset_id)
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return render(request, "evals/dataset.html", _dataset_context(dataset, import_form=form), status=400)
    upload = form.cleaned_data["file"]
    result = cases_import(dataset=dataset, data=upload.read(), filename=upload.name)
    if result.problems:
        context = _dataset_context(dataset, import_form=form, import_problems=result.problems, import_name=upload.name)
        return render(request, "evals/dataset.html", context, status=400)
    messages.success(request, _("Imported %(count)s cases.") % {"count": result.created})
    return HttpResponseRedirect(reverse("evals:dataset", args=[dataset.pk]))


@admins_only
@require_GET
def dataset_export(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """The cases as JSONL (?format=jsonl, the default) or CSV, which an import reads back."""
    dataset = _dataset_or_404(dataset_id)
    kind = request.GET.get("format", "jsonl")
    if kind not in EXPORTS:
        raise Http404(_("Export as jsonl or csv."))
    media_type, export = EXPORTS[kind]
    response = HttpResponse(export(dataset), content_type=f"{media_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="dataset-{dataset.pk}.{kind}"'
    return response


# --- cases ------------------------------------------------------------------------------------------------------


def _case_page(request: HttpRequest, dataset: Dataset, case: Case | None) -> HttpResponse:
    """The case form and its expectation editor: new (`case` None) or editing."""
    if request.method == "POST":
        form, expectations = CaseForm(request.POST), ExpectationFormSet(request.POST, prefix="expect")
    else:
        initial = {"title": case.title, "turns": join_turns(case.turns)} if case else None
        rows = [expectation_initial(e) for e in case.expectations] if case else None
        form, expectations = CaseForm(initial=initial), ExpectationFormSet(initial=rows, prefix="expect")
    if request.method == "POST" and form.is_valid() and expectations.is_valid():
        fields = {
            "title": form.cleaned_data["title"], "turns": form.cleaned_data["turns"],
            "expectations": expectations.expectations(),
        }  # fmt: skip
        try:
            case = case_create(dataset=dataset, **fields) if case is None else case_update(case=case, **fields)
        except (ValidationError, ExpectationError) as error:
            _errors_onto(form, error)
        else:
            messages.success(request, _("Saved the case."))
            return HttpResponseRedirect(reverse("evals:dataset", args=[dataset.pk]) + f"#case-{case.pk}")
    return render(
        request,
        "evals/case_form.html",
        {
            "dataset": dataset, "agent": dataset.agent, "case": case, "form": form, "expectations": expectations,
            "kind_fields": {str(kind): list(fields) for kind, fields in KIND_FIELDS.items()},
        },
    )  # fmt: skip


@admins_only
@require_http_methods(["GET", "POST"])
def case_new(request: HttpRequest, dataset_id: int) -> HttpResponse:
    return _case_page(request, _dataset_or_404(dataset_id), None)


@admins_only
@require_http_methods(["GET", "POST"])
def case_edit(request: HttpRequest, case_id: int) -> HttpResponse:
    case = _case_or_404(case_id)
    return _case_page(request, case.dataset, case)


@admins_only
@require_http_methods(["GET", "POST"])
def case_delete_view(request: HttpRequest, case_id: int) -> HttpResponse:
    """Asks first; the results of past runs keep their copy of the case's title."""
    case = _case_or_404(case_id)
    dataset = case.dataset
    if request.method == "POST":
        case_delete(case=case)
        messages.success(request, _("Deleted the case."))
        return HttpResponseRedirect(reverse("evals:dataset", args=[dataset.pk]))
    return render(
        request,
        "evals/confirm.html",
        {"agent": dataset.agent, "dataset": dataset, "case": case, "what": "case",
         "cancel_url": reverse("evals:dataset", args=[dataset.pk])},
    )  # fmt: skip


@admins_only
@require_POST
def case_from_message(request: HttpRequest, message_id: int) -> JsonResponse:
    """The chat page's "make a test case" button: the viewer's own 👎 rating of a reply becomes a case (once; a
    second click answers the same case). Another tenant's or another person's rating is a 404."""
    feedback = selectors.feedback_of_viewer(message_id=message_id, user_id=request.user.pk)
    if feedback is None:
        raise Http404(_("No rating of yours on this reply."))
    try:
        case = case_from_feedback(feedback=feedback, user=request.user)
    except (ValidationError, ValueError) as error:
        words = " ".join(error.messages) if isinstance(error, ValidationError) else str(error)
        return JsonResponse({"error": words}, status=400)
    return JsonResponse(
        {
            "case": case.pk, "dataset": case.dataset_id, "dataset_name": case.dataset.name,
            "url": reverse("evals:case_edit", args=[case.pk]),
        }
    )  # fmt: skip


# --- runs -------------------------------------------------------------------------------------------------------


@admins_only
@require_POST
def run_start_view(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """Start a run; over what is left of the tenant's budget, ask first (the page shows the estimate)."""
    dataset = _dataset_or_404(dataset_id)
    form = RunForm(request.POST, agent=dataset.agent)
    if not form.is_valid():
        return render(request, "evals/dataset.html", _dataset_context(dataset, run_form=form), status=400)
    try:
        run = run_start(
            dataset=dataset, version=form.chosen_version(), user=request.user,
            concurrency=form.cleaned_data["concurrency"], confirm_budget=form.cleaned_data["confirm_budget"],
        )  # fmt: skip
    except BudgetWarning as warning:
        confirm = RunForm(agent=dataset.agent, initial={**form.cleaned_data, "confirm_budget": True})
        context = _dataset_context(dataset, run_form=confirm, budget_warning=warning)
        return render(request, "evals/dataset.html", context, status=409)
    except RunRefused as refused:
        messages.error(request, refused.message)
        return HttpResponseRedirect(reverse("evals:dataset", args=[dataset.pk]))
    return HttpResponseRedirect(reverse("evals:run", args=[run.pk]))


def _status_labels() -> dict[str, str]:
    return {**dict(RunStatus.choices), **dict(ResultStatus.choices)}


def progress_payload(run: Run) -> dict[str, Any]:
    """run_progress with the words the page shows (status labels)."""
    progress = run_progress(run)
    labels = _status_labels()
    progress["status_label"] = labels.get(progress["status"], progress["status"])
    for result in progress.get("results", []):
        result["status_label"] = labels.get(result["status"], result["status"])
    return progress


def _result_rows(run: Run) -> list[dict[str, Any]]:
    """Each case's result with its verdicts' kinds named and the link to its conversation."""
    kinds = dict(ExpectationKind.choices)
    linked = conversation_page_registered()
    rows = []
    for result in selectors.results_of_run(run=run):
        verdicts = [
            {**verdict, "label": kinds.get(verdict.get("kind"), verdict.get("kind"))} for verdict in result.verdicts
        ]
        url = conversation_page(result.conversation) if linked and result.conversation else ""
        rows.append({"result": result, "verdicts": verdicts, "conversation_url": url})
    return rows


@admins_only
@require_GET
def run_detail(request: HttpRequest, eval_run_id: int) -> HttpResponse:
    run = _run_or_404(eval_run_id)
    return render(
        request,
        "evals/run.html",
        {
            "run": run, "dataset": run.dataset, "agent": run.agent, "rows": _result_rows(run),
            "progress": progress_payload(run),
            "others": [other for other in selectors.runs_of_dataset(dataset=run.dataset) if other.pk != run.pk],
        },
    )  # fmt: skip


@admins_only
@require_GET
def run_progress_view(request: HttpRequest, eval_run_id: int) -> JsonResponse:
    """The run's counters and each case's status, polled by static/js/evals.js about once a second."""
    return JsonResponse(progress_payload(_run_or_404(eval_run_id)))


@admins_only
@require_http_methods(["GET", "POST"])
def run_stop_view(request: HttpRequest, eval_run_id: int) -> HttpResponse:
    """Asks first; the cases under way finish and every result is kept."""
    run = _run_or_404(eval_run_id)
    if request.method == "POST":
        if not run.finished:
            run_stop(run=run)
            messages.success(request, _("Stopping the run: the cases under way finish, the results are kept."))
        return HttpResponseRedirect(reverse("evals:run", args=[run.pk]))
    return render(
        request,
        "evals/confirm.html",
        {"agent": run.agent, "dataset": run.dataset, "run": run, "what": "run",
         "cancel_url": reverse("evals:run", args=[run.pk])},
    )  # fmt: skip


@admins_only
@require_GET
def compare_view(request: HttpRequest) -> HttpResponse:
    """Two runs of one dataset side by side (?a=&b=): pass rates, fixed / broken / same, tokens, latency, replies."""
    a = _run_or_404(request.GET.get("a"))
    b = _run_or_404(request.GET.get("b")) if request.GET.get("b") else None
    runs = selectors.runs_of_dataset(dataset=a.dataset)
    form = CompareForm(runs=runs, initial={"a": str(a.pk), "b": str(b.pk) if b else ""})
    comparison, problem = None, ""
    if b is not None:
        try:
            comparison = compare(a, b)
        except ValueError as error:
            problem = str(error)
    return render(
        request,
        "evals/compare.html",
        {"a": a, "b": b, "dataset": a.dataset, "agent": a.agent, "form": form, "comparison": comparison,
         "problem": problem},
    )  # fmt: skip


# --- the publish gate -------------------------------------------------------------------------------------------


@admins_only
@require_http_methods(["GET", "POST"])
def gate_edit(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = _agent_or_404(agent_id)
    gate = Gate.objects.filter(agent=agent).first()
    initial = (
        {"enabled": gate.enabled, "dataset": gate.dataset_id, "threshold": round(gate.threshold * 100)} if gate else {}
    )
    form = GateForm(request.POST or None, agent=agent, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            gate_update(
                agent=agent, enabled=form.cleaned_data["enabled"], dataset=form.cleaned_data["dataset"],
                threshold=form.cleaned_data["threshold"] / 100,
            )  # fmt: skip
        except ValidationError as error:
            _errors_onto(form, error)
        else:
            messages.success(request, _("Saved the publish gate."))
            return HttpResponseRedirect(reverse("evals:datasets", args=[agent.pk]))
    return render(request, "evals/gate.html", {"agent": agent, "form": form})


# --- the agent page's section -----------------------------------------------------------------------------------


def agent_section(*, agent: Agent, request: HttpRequest) -> dict[str, Any] | None:
    """The agent page's "Evaluation" panel, for owners and admins: the latest finished run per version and the
    comparison of the draft's with the published version's when both ran the same dataset."""
    if not may_administer(request):
        return None
    runs = latest_runs(agent)
    draft = next((run for run in runs if run.version_id is None), None)
    published = next((run for run in runs if run.version_id is not None), None)
    compare_url = ""
    if draft and published and draft.dataset_id == published.dataset_id:
        compare_url = f"{reverse('evals:compare')}?a={published.pk}&b={draft.pk}"
    return {"agent": agent, "runs": runs, "compare_url": compare_url}


register_agent_section("evals", AgentSection(template="evals/_agent_section.html", context=agent_section, order=50))
