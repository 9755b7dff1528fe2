"""Plans and usage on the REST API. A plan is read by its conversation's owner and the tenant's administrators (its
log by administrators, as on the plan log page); it is resumed by sending the answer to its conversation and
stopped with the conversation's stop. Usage (tokens per day and model) is for administrators."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from asgiref.sync import async_to_sync
from django.db.models import Count, Prefetch, QuerySet, Sum, prefetch_related_objects
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from api.authentication import key_access
from api.models import KeyScope
from api.rest import ApiViewSet, StopSerializer, page_of, require_administrator
from engine import turns
from llm.models import LLMCall
from plans.models import Plan, PlanLog, PlanStep
from plans.selectors import access_plan, plans_readable


class PlanStepSerializer(serializers.ModelSerializer):
    dependsOn = serializers.ListField(source="depends_on", child=serializers.IntegerField())

    class Meta:
        model = PlanStep
        fields = ["seqNo", "agentName", "requirement", "status", "result", "dependsOn"]
        read_only_fields = fields


class PlanSerializer(serializers.ModelSerializer):
    """Seed 0's ExecutionPlan (`planId`, `userQuery`, `steps[].seqNo`, `agentName`...): the seed's names are kept, so
    every field of a plan and its steps is camelCase, the platform's own too (`allowConcurrency`, `dependsOn`,
    `createdAt`). The API's other objects, a plan's log rows included, are snake_case."""

    allowConcurrency = serializers.BooleanField(source="allow_concurrency", read_only=True)
    steps = PlanStepSerializer(many=True, read_only=True)
    createdAt = serializers.DateTimeField(source="created_at", read_only=True)
    updatedAt = serializers.DateTimeField(source="updated_at", read_only=True)

    class Meta:
        model = Plan
        fields = ["planId", "name", "userQuery", "status", "allowConcurrency", "conversation", "steps", "createdAt",
                  "updatedAt"]  # fmt: skip
        read_only_fields = fields


class PlanLogSerializer(serializers.ModelSerializer):
    class Meta:
        model = PlanLog
        fields = ["id", "step", "kind", "data", "created_at"]
        read_only_fields = fields


def _steps_in_order() -> Prefetch:
    return Prefetch("steps", queryset=PlanStep.objects.order_by("seqNo"))


class PlanViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    """Plans of the caller's conversations (administrators: every plan of the tenant), newest first."""

    serializer_class = PlanSerializer
    lookup_field = "planId"
    lookup_value_regex = r"[0-9a-fA-F-]{32,36}"
    write_scopes = {"stop": KeyScope.CHAT}
    agent_limited_actions = frozenset(write_scopes)  # plans of the key's agents only (get_queryset)

    def _reader(self) -> dict[str, Any]:
        """Who reads, as plans.selectors' access rule takes it: the caller, their membership of the request's tenant,
        and the agents an API key is limited to."""
        access = key_access(self.request)
        return {
            "user": self.request.user,
            "membership": getattr(self.request, "membership", None),
            "tenant": self.request.tenant,
            "agent_ids": access.chosen_agent_ids if access else None,
        }

    def get_queryset(self) -> QuerySet[Plan]:
        if (fake := self.schema_queryset()) is not None:
            return fake
        return plans_readable(**self._reader()).prefetch_related(_steps_in_order())

    def get_object(self) -> Plan:
        try:
            plan = access_plan(plan_id=uuid.UUID(self.kwargs["planId"]), **self._reader())
        except (ValueError, Plan.DoesNotExist):
            raise exceptions.NotFound(_("No such plan.")) from None
        prefetch_related_objects([plan], _steps_in_order())
        return plan

    @extend_schema(responses={200: page_of(PlanLogSerializer)})
    @action(detail=True, methods=["get"])
    def log(self, request: Request, planId: str | None = None) -> Response:
        """State changes, model calls and tool calls, in order (administrators)."""
        plan = self.get_object()
        require_administrator(request)
        page = self.paginate_queryset(PlanLog.objects.filter(plan=plan).order_by("id"))
        return self.get_paginated_response(PlanLogSerializer(page, many=True).data)

    @extend_schema(request=None, responses={200: StopSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, planId: str | None = None) -> Response:
        """Stop the plan's running turn (its steps end as stopped; what was written is stored)."""
        plan = self.get_object()
        return Response({"stopped": async_to_sync(turns.request_stop)(conversation_id=plan.conversation_id)})


class UsageRowSerializer(serializers.Serializer):
    day = serializers.DateField()
    model = serializers.CharField()
    calls = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()


class UsageViewSet(ApiViewSet):
    serializer_class = UsageRowSerializer
    pagination_class = None

    @extend_schema(
        parameters=[OpenApiParameter("days", int, description="How many days back (1-366, default 30).")],
        responses={200: UsageRowSerializer(many=True)},
    )
    def list(self, request: Request) -> Response:
        """Model tokens per day and model (administrators)."""
        require_administrator(request)
        days = request.query_params.get("days") or "30"
        if not days.isdigit() or not 1 <= int(days) <= 366:
            raise exceptions.ValidationError({"days": [_("Choose a number from 1 to 366.")]})
        since = timezone.now() - dt.timedelta(days=int(days))
        rows = (
            LLMCall.objects.filter(created_at__gte=since)
            .annotate(day=TruncDate("created_at"))
            .values("day", "model")
            .annotate(
                calls=Count("id"),
                prompt_tokens=Sum("prompt_tokens"),
                completion_tokens=Sum("completion_tokens"),
                total_tokens=Sum("total_tokens"),
            )
            .order_by("day", "model")
        )
        return Response(UsageRowSerializer(rows, many=True).data)
