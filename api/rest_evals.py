"""Evaluation on the REST API (docs/evaluation.md, "Pages and API"): an agent's datasets, their cases (import and
export), runs (start, progress, stop, results), two runs compared, and a case made from a 👎 rating. Owners and
admins only, as on the pages; a key reads with `read` and changes or runs with `write`. A key limited to some agents
reaches those agents' datasets only; another tenant's dataset, case, run or rating answers 404 like a missing one.
Every decision is the pages' own service (evals.services, evals.runner, evals.compare)."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, renderers, serializers, status
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from agents.models import Agent, AgentVersion
from api.parsers import BoundedJSONParser
from api.rest import ApiViewSet, _agents_for, _error, page_of, require_administrator
from core.conf import setting
from evals import selectors
from evals.compare import compare
from evals.expectations import ExpectationError
from evals.io import export_csv, export_jsonl
from evals.models import Case, CaseResult, Dataset, ResultStatus, Run, RunStatus
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
)
from memory.models import Feedback


def _validation(error: DjangoValidationError | ExpectationError) -> exceptions.ValidationError:
    if isinstance(error, ExpectationError):
        return exceptions.ValidationError({"expectations": [error.message]})
    return exceptions.ValidationError(error.message_dict if hasattr(error, "error_dict") else error.messages)


def _reachable_agents(request: Request) -> QuerySet[Agent]:
    """The agents whose evaluation a caller reaches (api.rest's one rule of which agents a caller reaches)."""
    return _agents_for(request).values("pk")


# --- serializers -----------------------------------------------------------------------------------------------


class EvalDatasetSerializer(serializers.ModelSerializer):
    case_count = serializers.SerializerMethodField(help_text="How many cases the dataset holds.")

    class Meta:
        model = Dataset
        fields = ["id", "agent", "name", "description", "judge_prompt", "case_count", "created_at", "updated_at"]
        read_only_fields = ["id", "agent", "case_count", "created_at", "updated_at"]

    def get_case_count(self, dataset: Dataset) -> int:
        """The list's annotation when there is one (no query per row); a dataset just made or changed counts."""
        counted = getattr(dataset, "case_count", None)
        return counted if counted is not None else dataset.cases.count()


class EvalCaseSerializer(serializers.ModelSerializer):
    turns = serializers.ListField(child=serializers.CharField(trim_whitespace=False), help_text="The user turns.")
    expectations = serializers.ListField(
        child=serializers.DictField(),
        help_text='What the reply must show: [{"kind": "contains", "text": "..."}, ...] (docs/evaluation.md).',
    )

    class Meta:
        model = Case
        fields = ["id", "dataset", "position", "title", "turns", "expectations", "source", "feedback",
                  "created_at", "updated_at"]  # fmt: skip
        read_only_fields = ["id", "dataset", "position", "source", "feedback", "created_at", "updated_at"]


class EvalRunSerializer(serializers.ModelSerializer):
    status = serializers.ChoiceField(choices=RunStatus.choices, read_only=True)
    version_number = serializers.IntegerField(source="version.number", read_only=True, allow_null=True, default=None)
    pass_rate = serializers.FloatField(read_only=True, allow_null=True)
    finished = serializers.BooleanField(read_only=True)

    class Meta:
        model = Run
        fields = ["id", "dataset", "agent", "version", "version_number", "status", "concurrency", "total", "done",
                  "passed", "failed", "errored", "pass_rate", "tokens", "judge_tokens", "stop_requested", "finished",
                  "error", "created_at", "started_at", "finished_at"]  # fmt: skip
        read_only_fields = fields


class ResultStatusSerializer(serializers.Serializer):
    position = serializers.IntegerField()
    title = serializers.CharField()
    status = serializers.ChoiceField(choices=ResultStatus.choices)


class EvalRunProgressSerializer(EvalRunSerializer):
    results = ResultStatusSerializer(many=True, read_only=True, help_text="Each finished case's status.")

    class Meta(EvalRunSerializer.Meta):
        fields = [*EvalRunSerializer.Meta.fields, "results"]
        read_only_fields = fields


class RunStartSerializer(serializers.Serializer):
    dataset = serializers.IntegerField()
    version = serializers.IntegerField(
        allow_null=True, required=False, default=None, help_text="A published version's id; null: the draft."
    )
    concurrency = serializers.IntegerField(min_value=1, required=False, default=4)
    confirm_budget = serializers.BooleanField(
        required=False, default=False, help_text="Start even when the run may pass the tenant's budget."
    )

    def validate_concurrency(self, value: int) -> int:
        limit = int(setting("EVAL_MAX_CONCURRENCY"))
        if value > limit:
            raise serializers.ValidationError(_("At most %(max)s cases at once.") % {"max": limit})
        return value


class VerdictSerializer(serializers.Serializer):
    kind = serializers.CharField()
    passed = serializers.BooleanField()
    detail = serializers.CharField(allow_blank=True)


class EvalResultSerializer(serializers.ModelSerializer):
    verdicts = VerdictSerializer(many=True, read_only=True)

    class Meta:
        model = CaseResult
        fields = ["id", "case", "position", "title", "status", "reply", "verdicts", "tokens_in", "tokens_out",
                  "judge_tokens", "latency_ms", "conversation", "trace_id", "error"]  # fmt: skip
        read_only_fields = fields


class CompareRowSerializer(serializers.Serializer):
    case = serializers.IntegerField(source="case_id", allow_null=True)
    title = serializers.CharField()
    change = serializers.CharField(help_text="fixed, broken, same_pass, same_fail, only_a or only_b.")
    a = EvalResultSerializer(allow_null=True)
    b = EvalResultSerializer(allow_null=True)


class ComparisonSerializer(serializers.Serializer):
    a = serializers.IntegerField(source="a.pk")
    b = serializers.IntegerField(source="b.pk")
    pass_rate_a = serializers.FloatField(allow_null=True)
    pass_rate_b = serializers.FloatField(allow_null=True)
    fixed = serializers.IntegerField()
    broken = serializers.IntegerField()
    same = serializers.IntegerField()
    tokens_a = serializers.IntegerField()
    tokens_b = serializers.IntegerField()
    latency_a_ms = serializers.FloatField(allow_null=True, help_text="Mean per case.")
    latency_b_ms = serializers.FloatField(allow_null=True)
    rows = CompareRowSerializer(many=True)


class ImportSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="CSV (with a header row) or JSONL, UTF-8 (multipart).")


class ImportProblemSerializer(serializers.Serializer):
    line = serializers.IntegerField(help_text="1 = the first line; 0 = the whole file.")
    message = serializers.CharField()
    field = serializers.CharField(allow_blank=True)


class ImportResultSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    problems = ImportProblemSerializer(many=True)


class BudgetWarningSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="budget_warning")
    message = serializers.CharField()
    estimate = serializers.IntegerField(help_text="The tokens the run may use.")
    remaining = serializers.IntegerField(help_text="The tokens left of the tenant's monthly budget.")


class ExportRenderer(renderers.BaseRenderer):
    """An export's text as it is (a JSON body for an error)."""

    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> str:
        # Text, which DRF encodes with `charset`: bytes that are empty (a dataset without cases) would make DRF
        # drop the Content-Type header.
        return data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)


class JsonlRenderer(ExportRenderer):
    media_type = "application/x-ndjson"
    format = "jsonl"


class CsvRenderer(ExportRenderer):
    media_type = "text/csv"
    format = "csv"


# --- datasets of an agent ----------------------------------------------------------------------------------------


class AgentEvalDatasetViewSet(ApiViewSet):
    """/agents/{agent_id}/eval-datasets/: an agent's evaluation datasets; GET lists, POST creates."""

    serializer_class = EvalDatasetSerializer
    agent_limited_actions = frozenset({"create"})

    def _agent(self) -> Agent:
        agent = Agent.objects.filter(pk=self.kwargs["agent_id"], pk__in=_reachable_agents(self.request)).first()
        if agent is None:
            raise exceptions.NotFound(_("No such agent."))
        return agent

    @extend_schema(responses={200: page_of(EvalDatasetSerializer)})
    def list(self, request: Request, agent_id: int) -> Response:
        """The agent's datasets with their number of cases."""
        agent = self._agent()
        require_administrator(request)
        page = self.paginate_queryset(selectors.datasets_of_agent(agent=agent))
        return self.get_paginated_response(EvalDatasetSerializer(page, many=True).data)

    @extend_schema(request=EvalDatasetSerializer, responses={201: EvalDatasetSerializer})
    def create(self, request: Request, agent_id: int) -> Response:
        """A new dataset of the agent (its name unique among the agent's)."""
        agent = self._agent()
        require_administrator(request)
        data = EvalDatasetSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            dataset = dataset_create(agent=agent, user=request.user, **data.validated_data)
        except DjangoValidationError as error:
            raise _validation(error) from None
        return Response(EvalDatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


# --- a dataset, its cases, import and export ----------------------------------------------------------------------


class EvalDatasetViewSet(mixins.RetrieveModelMixin, mixins.DestroyModelMixin, ApiViewSet):
    """/eval-datasets/{id}/: one dataset; its cases, import and export."""

    serializer_class = EvalDatasetSerializer
    parser_classes = [BoundedJSONParser, MultiPartParser, FormParser]
    agent_limited_actions = frozenset({"partial_update", "destroy", "cases", "import_"})

    def get_queryset(self) -> QuerySet[Dataset]:
        if (fake := self.schema_queryset()) is not None:
            return fake
        return Dataset.objects.filter(agent__in=_reachable_agents(self.request)).select_related("agent")

    def get_object(self) -> Dataset:
        dataset = super().get_object()
        require_administrator(self.request)
        return dataset

    @extend_schema(request=EvalDatasetSerializer, responses={200: EvalDatasetSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Change its name, description or judge prompt (empty: the default prompt)."""
        dataset = self.get_object()
        data = EvalDatasetSerializer(dataset, data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        try:
            dataset_update(dataset=dataset, **data.validated_data)
        except DjangoValidationError as error:
            raise _validation(error) from None
        return Response(EvalDatasetSerializer(dataset).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete it with its cases and runs."""
        dataset_delete(dataset=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(methods=["GET"], responses={200: page_of(EvalCaseSerializer)})
    @extend_schema(methods=["POST"], request=EvalCaseSerializer, responses={201: EvalCaseSerializer})
    @action(detail=True, methods=["get", "post"])
    def cases(self, request: Request, pk: str | None = None) -> Response:
        """GET: its cases in order. POST: add a case (at least one turn and one valid expectation)."""
        dataset = self.get_object()
        if request.method == "GET":
            page = self.paginate_queryset(selectors.cases_of_dataset(dataset=dataset))
            return self.get_paginated_response(EvalCaseSerializer(page, many=True).data)
        data = EvalCaseSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            case = case_create(dataset=dataset, **data.validated_data)
        except (DjangoValidationError, ExpectationError) as error:
            raise _validation(error) from None
        return Response(EvalCaseSerializer(case).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request={"multipart/form-data": ImportSerializer},
        responses={201: ImportResultSerializer, 400: ImportResultSerializer},
    )
    @action(detail=True, methods=["post"], url_path="import")
    def import_(self, request: Request, pk: str | None = None) -> Response:
        """Add the cases of a CSV or JSONL file: all or none; 400 lists the problems by line and stores nothing."""
        dataset = self.get_object()
        data = ImportSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        upload = data.validated_data["file"]
        result = cases_import(dataset=dataset, data=upload.read(), filename=upload.name)
        problems = [{"line": p.line, "message": p.message, "field": p.field} for p in result.problems]
        code = status.HTTP_400_BAD_REQUEST if problems else status.HTTP_201_CREATED
        return Response({"created": result.created, "problems": problems}, status=code)

    @extend_schema(
        parameters=[OpenApiParameter("format", str, enum=["jsonl", "csv"], description="jsonl (default) or csv")],
        responses={(200, "application/x-ndjson"): OpenApiTypes.STR, (200, "text/csv"): OpenApiTypes.STR},
    )
    @action(detail=True, methods=["get"], renderer_classes=[JsonlRenderer, CsvRenderer])
    def export(self, request: Request, pk: str | None = None) -> Response:
        """Its cases as JSONL or CSV, which an import reads back."""
        dataset = self.get_object()
        kind = request.accepted_renderer.format
        response = Response(export_csv(dataset) if kind == "csv" else export_jsonl(dataset))
        response["Content-Disposition"] = f'attachment; filename="dataset-{dataset.pk}.{kind}"'
        return response


class EvalCaseViewSet(mixins.RetrieveModelMixin, ApiViewSet):
    """/eval-cases/{id}/: one case; change or delete it."""

    serializer_class = EvalCaseSerializer
    agent_limited_actions = frozenset({"partial_update", "destroy"})

    def get_queryset(self) -> QuerySet[Case]:
        if (fake := self.schema_queryset()) is not None:
            return fake
        return Case.objects.filter(dataset__agent__in=_reachable_agents(self.request))

    def get_object(self) -> Case:
        case = super().get_object()
        require_administrator(self.request)
        return case

    @extend_schema(request=EvalCaseSerializer, responses={200: EvalCaseSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Change its title, turns or expectations."""
        case = self.get_object()
        data = EvalCaseSerializer(case, data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        try:
            case = case_update(case=case, **data.validated_data)
        except (DjangoValidationError, ExpectationError) as error:
            raise _validation(error) from None
        return Response(EvalCaseSerializer(case).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete it; runs keep their results of it."""
        case_delete(case=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- runs and comparisons -----------------------------------------------------------------------------------------


class EvalRunViewSet(mixins.ListModelMixin, ApiViewSet):
    """/eval-runs/: runs of datasets against a version; start, follow, stop, read the results."""

    serializer_class = EvalRunSerializer
    agent_limited_actions = frozenset({"create", "stop"})

    def get_queryset(self) -> QuerySet[Run]:
        if (fake := self.schema_queryset()) is not None:
            return fake
        runs = Run.objects.filter(agent__in=_reachable_agents(self.request)).select_related("version")
        dataset = self.request.query_params.get("dataset")
        return runs.filter(dataset_id=int(dataset)) if dataset and dataset.isdigit() else runs.order_by("-id")

    def get_object(self) -> Run:
        run = super().get_object()
        require_administrator(self.request)
        return run

    @extend_schema(
        parameters=[OpenApiParameter("dataset", int, description="Only the runs of this dataset.")],
        responses={200: page_of(EvalRunSerializer)},
    )
    def list(self, request: Request) -> Response:
        """The runs, newest first."""
        require_administrator(request)
        return super().list(request)

    @extend_schema(
        request=RunStartSerializer,
        responses={
            201: EvalRunSerializer,
            409: OpenApiResponse(
                BudgetWarningSerializer,
                description="`budget_warning` (send confirm_budget: true to start anyway) or `run_refused`.",
            ),
        },
    )
    def create(self, request: Request) -> Response:
        """Start a run of a dataset against a version (null: the draft as it is now), in the background. 409
        `budget_warning` with the estimate when it may pass what is left of the tenant's budget; 409 `run_refused`
        when it cannot start (no cases, the same run already under way)."""
        require_administrator(request)
        data = RunStartSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        dataset = Dataset.objects.filter(pk=fields["dataset"], agent__in=_reachable_agents(request)).first()
        if dataset is None:
            raise exceptions.NotFound(_("No such evaluation dataset."))
        version = None
        if fields["version"] is not None:
            version = AgentVersion.objects.filter(pk=fields["version"], agent_id=dataset.agent_id).first()
            if version is None:
                raise exceptions.ValidationError({"version": [_("No such version of this dataset's agent.")]})
        try:
            run = run_start(dataset=dataset, version=version, user=request.user,
                            concurrency=fields["concurrency"], confirm_budget=fields["confirm_budget"])  # fmt: skip
        except BudgetWarning as warning:
            body = {"code": "budget_warning", "message": warning.message, "estimate": warning.estimate,
                    "remaining": warning.remaining}  # fmt: skip
            return Response({"error": body}, status=status.HTTP_409_CONFLICT)
        except RunRefused as refused:
            return _error(status.HTTP_409_CONFLICT, "run_refused", refused.message)
        return Response(EvalRunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: EvalRunProgressSerializer})
    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        """Its progress: counters, pass rate, whether it ended (and why), each finished case's status."""
        run = self.get_object()
        progress = run_progress(run)
        return Response({**EvalRunSerializer(run).data, "results": progress["results"]})

    @extend_schema(request=None, responses={200: EvalRunSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        """Stop it: the cases under way finish, the others do not run; the results are kept."""
        run = self.get_object()
        return Response(EvalRunSerializer(run_stop(run=run) if not run.finished else run).data)

    @extend_schema(responses={200: page_of(EvalResultSerializer)})
    @action(detail=True, methods=["get"])
    def results(self, request: Request, pk: str | None = None) -> Response:
        """Each case's result: reply, verdict per expectation, tokens, latency, conversation and trace."""
        run = self.get_object()
        page = self.paginate_queryset(selectors.results_of_run(run=run))
        return self.get_paginated_response(EvalResultSerializer(page, many=True).data)


class EvalCompareViewSet(ApiViewSet):
    """/eval-compare/?a=&b=: two runs of one dataset side by side."""

    serializer_class = ComparisonSerializer
    pagination_class = None

    def _run(self, request: Request, name: str) -> Run:
        value = request.query_params.get(name) or ""
        run = None
        if value.isdigit():
            run = Run.objects.filter(pk=int(value), agent__in=_reachable_agents(request)).first()
        if run is None:
            raise exceptions.NotFound(_("No such evaluation run: %(name)s.") % {"name": name})
        return run

    @extend_schema(
        parameters=[
            OpenApiParameter("a", int, required=True, description="The run compared from (e.g. the published)."),
            OpenApiParameter("b", int, required=True, description="The run compared to (e.g. the draft)."),
        ],
        responses={200: ComparisonSerializer},
    )
    def list(self, request: Request) -> Response:
        """Pass rates, per-case changes (fixed / broken / same), tokens, mean latency and both replies."""
        require_administrator(request)
        a, b = self._run(request, "a"), self._run(request, "b")
        try:
            comparison = compare(a, b)
        except ValueError as error:
            raise exceptions.ValidationError({"b": [str(error)]}) from None
        return Response(ComparisonSerializer(comparison).data)


class FeedbackEvalCaseViewSet(ApiViewSet):
    """/feedback/{id}/eval-case/: a 👎 rating becomes a case (once)."""

    serializer_class = EvalCaseSerializer
    agent_limited_actions = frozenset({"eval_case"})

    def get_queryset(self) -> QuerySet[Feedback]:
        if getattr(self, "swagger_fake_view", False):
            return Feedback.objects.none()
        return Feedback.objects.filter(message__conversation__agent__in=_reachable_agents(self.request))

    @extend_schema(request=None, responses={201: EvalCaseSerializer, 200: EvalCaseSerializer})
    @action(detail=True, methods=["post"], url_path="eval-case")
    def eval_case(self, request: Request, pk: str | None = None) -> Response:
        """Make an evaluation case of a 👎 rating: the user's turns up to the rated reply, its comment as the
        rubric, in the agent's feedback dataset. A second call answers the same case (200)."""
        feedback = self.get_queryset().filter(pk=int(pk)).select_related("message").first()
        if feedback is None:
            raise exceptions.NotFound(_("No such rating."))
        require_administrator(request)
        existed = Case.objects.filter(feedback=feedback).exists()
        try:
            case = case_from_feedback(feedback=feedback, user=request.user)
        except DjangoValidationError as error:
            raise _validation(error) from None
        return Response(
            EvalCaseSerializer(case).data, status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED
        )
