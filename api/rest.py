"""The REST API under /api/v1/ (R1), with Django REST framework: agents and conversations so far.

Sessions (the pages' own use) and API keys both work; a key acts as its member within its scopes and agents. Every
queryset goes through the tenant-scoped managers, so another tenant's id is a 404 like a missing one.
"""

from __future__ import annotations

import uuid
from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Max, QuerySet
from django.http import Http404
from django.utils.translation import gettext as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler

from agents.export import AgentImportError, agent_export, agent_import, export_filename
from agents.limits import MAX_MESSAGE_CHARS
from agents.models import Agent, AgentKind, MemoryExtraction, Workflow, WorkflowRun
from agents.publishgate import PublishRefused
from agents.runtime import TurnStatus
from agents.services import agent_create, agent_publish, agent_update, conversation_start
from agents.workflows.schema import WorkflowValidationError
from agents.workflows.services import workflow_runs_for, workflow_validate
from api.authentication import HasScope, TenantScopedApiView, administers, key_access
from api.keys import caller_conversation
from api.models import KeyScope
from api.parsers import attachment_ids, attachment_ids_words
from api.refusals import refusal_response
from engine import admission, turns
from engine.admission import MAX_CLIENT_ID_CHARS, Admitted, Caller, Refusal, Target
from engine.turns import Outcome
from llm import errors
from memory.feedback import MAX_COMMENT_CHARS, feedback_record
from memory.models import Conversation, ConversationSource, Message


class Pages(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


def page_of(serializer: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """The schema of a page of `serializer` (a detail action's list, which drf-spectacular does not paginate)."""
    name = serializer.__name__.removesuffix("Serializer")
    fields = {
        "count": serializers.IntegerField(),
        "next": serializers.URLField(allow_null=True),
        "previous": serializers.URLField(allow_null=True),
        "results": serializer(many=True),
    }
    return type(f"{name}Page", (serializers.Serializer,), fields)


# The `code` of DRF's exceptions whose own code is too generic for clients to branch on.
ERROR_CODES = {exceptions.ValidationError: "validation_error", exceptions.ParseError: "parse_error"}


def _drf_exception(exc: Exception, context: dict[str, Any]) -> Exception:
    """Django's Http404 and PermissionDenied as DRF's, with a translated message naming what was not found
    (get_object_or_404's own message is English and names the model's class)."""
    if isinstance(exc, Http404):
        view = context.get("view")
        model = getattr(getattr(view, "queryset", None), "model", None) or getattr(
            getattr(getattr(view, "serializer_class", None), "Meta", None), "model", None
        )
        if model is None:
            return exceptions.NotFound()
        return exceptions.NotFound(_("No such %(thing)s.") % {"thing": model._meta.verbose_name})
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    return exc


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every error of /api/v1 in one shape: {"error": {"code", "message", "fields"?}}, `code` a specific word
    (not_found, permission_denied, validation_error, throttled...), `message` in the request's language."""
    exc = _drf_exception(exc, context)
    response = exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    code = ERROR_CODES.get(type(exc))
    if isinstance(exc, exceptions.ValidationError) and isinstance(detail, dict):
        body = {"code": code, "message": _("Some fields are not valid."), "fields": detail}
    elif isinstance(exc, exceptions.ValidationError):
        messages = detail if isinstance(detail, list) else [detail]
        body = {"code": code, "message": " ".join(str(m) for m in messages)}
    else:
        message = detail.get("detail", detail) if isinstance(detail, dict) else detail
        code = code or getattr(message, "code", None) or getattr(exc, "default_code", None) or "error"
        body = {"code": str(code), "message": str(message)}
    response.data = {"error": body}
    return response


class ApiKeySchema(OpenApiAuthenticationExtension):
    target_class = "api.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer", "description": _("A tenant API key: ak-….")}


class ApiViewSet(TenantScopedApiView, viewsets.GenericViewSet):
    permission_classes = [HasScope]
    # The writes a key limited to some agents may make (on those agents; api.authentication.HasScope): none by default.
    agent_limited_actions: frozenset[str] = frozenset()
    pagination_class = Pages
    lookup_value_regex = r"\d+"

    def schema_queryset(self) -> QuerySet | None:
        """While drf-spectacular builds the schema (no request): an empty queryset of the model, for the types."""
        if getattr(self, "swagger_fake_view", False):
            return self.serializer_class.Meta.model.objects.none()
        return None


# --- agents -----------------------------------------------------------------------------------------------------


# The editable agent settings (agents.settings_table) the REST API does not write; the write serializer takes every
# other one (tests/agents/test_settings_table.py checks it).
AGENT_SETTINGS_NOT_WRITTEN = frozenset(
    {
        # The API lists no providers (their keys and URLs are the tenant's secrets): a client has no id to give.
        "provider",
        # A key limited to some agents reads the knowledge bases they use: attaching one would open any of the tenant's.
        "knowledge_bases",
    }
)


# An agent as the API reads it: its id, API name, published version and some of its settings (not the system
# prompt, the token management, the provider or the knowledge bases). A comment, not a docstring: the schema shows
# a serializer's docstring to clients.
class AgentSerializer(serializers.ModelSerializer):
    # A plain string: the slug keeps Chinese letters, which the schema's ASCII `\w` pattern would refuse.
    slug = serializers.CharField(read_only=True, help_text="The agent's API name: the `model` of /v1/chat/completions.")
    published_version = serializers.IntegerField(source="published_number", read_only=True, allow_null=True)

    class Meta:
        model = Agent
        fields = [
            "id",
            "slug",
            "name",
            "description",
            "kind",
            "active",
            "model",
            "temperature",
            "max_reply_tokens",
            "tools",
            "long_term_memory",
            "memory_extraction",
            "published_version",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class VersionSerializer(serializers.Serializer):
    agent = serializers.IntegerField()
    number = serializers.IntegerField()


def _agents_for(request: Request) -> QuerySet[Agent]:
    """The agents a caller reaches: a session, every agent of the tenant; a key, its published agents, or every
    agent (drafts too) when it may write and acts as an administrator; a key limited to some agents, only those."""
    agents = Agent.objects.annotate(published_number=Max("versions__number")).order_by("name")
    access = key_access(request)
    if access is None:
        return agents
    if access.key.has_scope(KeyScope.WRITE) and administers(request):
        return agents.filter(pk__in=access.chosen_agent_ids) if access.chosen_agent_ids else agents
    return agents.filter(pk__in=access.agents().values("pk"))


def require_administrator(request: Request) -> None:
    if not administers(request):
        raise exceptions.PermissionDenied(_("Only the tenant's owners and admins change this."))


def _validation(error: DjangoValidationError) -> exceptions.ValidationError:
    return exceptions.ValidationError(error.message_dict if hasattr(error, "error_dict") else error.messages)


# The agent settings a client writes: every editable one but AGENT_SETTINGS_NOT_WRITTEN.
class AgentWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    description = serializers.CharField(required=False, allow_blank=True)
    system_prompt = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    model = serializers.CharField(required=False, allow_blank=True, max_length=200)
    temperature = serializers.FloatField(required=False, min_value=0.0, max_value=2.0)
    # Checked by the model (agents.models: its messages and maximum); null: no cap.
    max_reply_tokens = serializers.IntegerField(
        required=False, allow_null=True, help_text="The longest reply in tokens (null: no cap, the model's own)."
    )
    kind = serializers.ChoiceField(choices=AgentKind.choices, required=False)
    tools = serializers.ListField(child=serializers.CharField(), required=False)
    token_overflow_config = serializers.DictField(required=False)
    long_term_memory = serializers.BooleanField(required=False)
    memory_extraction = serializers.ChoiceField(choices=MemoryExtraction.choices, required=False)
    active = serializers.BooleanField(required=False)


class AgentYamlSerializer(serializers.Serializer):
    yaml = serializers.CharField(help_text="An agent export (GET /api/v1/agents/{id}/export/).")
    filename = serializers.CharField(read_only=True)


class AgentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    """The tenant's agents: read by members (a key: its published agents); created, changed, published, exported
    and imported by owners and admins (a key needs `write`)."""

    serializer_class = AgentSerializer
    agent_limited_actions = frozenset({"partial_update", "publish"})

    def get_queryset(self) -> QuerySet[Agent]:
        if (fake := self.schema_queryset()) is not None:
            return fake
        agents = _agents_for(self.request)
        kind = self.request.query_params.get("kind")
        return agents.filter(kind=kind) if kind else agents

    def _fresh(self, agent: Agent) -> dict[str, Any]:
        return AgentSerializer(self.get_queryset().get(pk=agent.pk)).data

    @extend_schema(request=AgentWriteSerializer, responses={201: AgentSerializer})
    def create(self, request: Request) -> Response:
        """Create a draft agent (publish it to use it in new conversations)."""
        require_administrator(request)
        data = AgentWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            agent = agent_create(tenant=request.tenant, **data.validated_data)
        except DjangoValidationError as error:
            raise _validation(error) from None
        return Response(self._fresh(agent), status=status.HTTP_201_CREATED)

    @extend_schema(request=AgentWriteSerializer, responses={200: AgentSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Change the draft; published versions (and conversations on them) stay as they were."""
        agent = self.get_object()
        require_administrator(request)
        data = AgentWriteSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        try:
            agent_update(agent=agent, **data.validated_data)
        except DjangoValidationError as error:
            raise _validation(error) from None
        return Response(self._fresh(agent))

    @extend_schema(request=None, responses={201: VersionSerializer})
    @action(detail=True, methods=["post"])
    def publish(self, request: Request, pk: str | None = None) -> Response:
        """Freeze the draft as the next version (owners and admins). 409 `publish_gate` when the agent's publish
        gate refuses it (docs/evaluation.md)."""
        agent = self.get_object()
        require_administrator(request)
        try:
            version = agent_publish(agent=agent, user=request.user)
        except PublishRefused as refused:
            return _error(status.HTTP_409_CONFLICT, "publish_gate", refused.message)
        return Response({"agent": version.agent_id, "number": version.number}, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: AgentYamlSerializer})
    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk: str | None = None) -> Response:
        """The agent (and its workflow) as the YAML the agent pages export."""
        agent = self.get_object()
        require_administrator(request)
        return Response({"yaml": agent_export(agent=agent), "filename": export_filename(agent.name)})

    @extend_schema(request=AgentYamlSerializer, responses={201: AgentSerializer})
    @action(detail=False, methods=["post"], url_path="import")
    def import_(self, request: Request) -> Response:
        """Create an agent from an export (a name already taken gets a number)."""
        require_administrator(request)
        data = AgentYamlSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            agent = agent_import(tenant=request.tenant, text=data.validated_data["yaml"])
        except AgentImportError as error:
            raise exceptions.ValidationError({"yaml": error.errors}) from None
        return Response(self._fresh(agent), status=status.HTTP_201_CREATED)


# --- workflows ----------------------------------------------------------------------------------------------------


class WorkflowSerializer(serializers.ModelSerializer):
    class Meta:
        model = Workflow
        fields = ["id", "name", "description", "agent", "yaml", "updated_at"]
        read_only_fields = fields


class WorkflowRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = WorkflowRun
        fields = ["id", "status", "inputs", "outputs", "log", "error", "duration_ms", "conversation", "started_at"]
        read_only_fields = fields


class WorkflowIssueSerializer(serializers.Serializer):
    message = serializers.CharField()
    step = serializers.CharField(allow_null=True)
    field = serializers.CharField(allow_null=True)
    line = serializers.IntegerField(allow_null=True)
    column = serializers.IntegerField(allow_null=True)


class WorkflowCheckSerializer(serializers.Serializer):
    yaml = serializers.CharField(trim_whitespace=False)
    valid = serializers.BooleanField(read_only=True)
    errors = WorkflowIssueSerializer(many=True, read_only=True)


class WorkflowViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    """The tenant's YAML workflows and their runs. A workflow runs as its workflow agent's turn: start a conversation
    with that agent and send a message (POST /api/v1/conversations/, then .../messages/)."""

    serializer_class = WorkflowSerializer
    write_scopes = {"validate": KeyScope.READ}
    agent_limited_actions = frozenset({"validate"})  # saves nothing

    def get_queryset(self) -> QuerySet[Workflow]:
        if (fake := self.schema_queryset()) is not None:
            return fake
        return Workflow.objects.order_by("name")

    @extend_schema(request=WorkflowCheckSerializer, responses={200: WorkflowCheckSerializer})
    @action(detail=False, methods=["post"])
    def validate(self, request: Request) -> Response:
        """Check a workflow document: every problem with its step, field and line (nothing is saved)."""
        data = WorkflowCheckSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            workflow_validate(yaml_text=data.validated_data["yaml"], tenant=request.tenant)
        except WorkflowValidationError as error:
            issues = [issue.as_dict() for issue in error.errors]
            return Response({"yaml": data.validated_data["yaml"], "valid": False, "errors": issues})
        return Response({"yaml": data.validated_data["yaml"], "valid": True, "errors": []})

    @extend_schema(responses={200: page_of(WorkflowRunSerializer)})
    @action(detail=True, methods=["get"])
    def runs(self, request: Request, pk: str | None = None) -> Response:
        """The workflow's runs, newest first, with each step's log: a member's own runs, every run for
        administrators (a run's log holds what was typed)."""
        workflow = self.get_object()
        runs = workflow_runs_for(workflow=workflow, user_id=None if administers(request) else request.user.pk)
        page = self.paginate_queryset(runs)
        return self.get_paginated_response(WorkflowRunSerializer(page, many=True).data)


# --- conversations and messages -------------------------------------------------------------------------------


class ConversationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Conversation
        fields = ["id", "agent", "title", "model", "created_at", "updated_at"]
        read_only_fields = ["id", "title", "model", "created_at", "updated_at"]


class ConversationCreateSerializer(serializers.Serializer):
    agent = serializers.IntegerField(help_text="The agent's id (GET /api/v1/agents/).")
    title = serializers.CharField(required=False, allow_blank=True, max_length=200)


class MessageSerializer(serializers.ModelSerializer):
    class Meta:
        model = Message
        fields = ["id", "role", "content", "status", "error_code", "client_id", "usage", "created_at"]
        read_only_fields = fields


class SendSerializer(serializers.Serializer):
    """The message's shape for the schema; what it may hold is the engine's admission's decision (its refusals)."""

    content = serializers.CharField(
        max_length=MAX_MESSAGE_CHARS, trim_whitespace=False, help_text="The message (at most 20,000 characters)."
    )
    client_id = serializers.CharField(
        required=False, max_length=MAX_CLIENT_ID_CHARS,
        help_text="Sending again with the same client_id returns the first answer; the turn runs once.",
    )  # fmt: skip
    attachments = serializers.ListField(
        child=serializers.IntegerField(), required=False,
        help_text="Files uploaded before (POST /api/v1/attachments/), sent with this message; content may then be "
        "empty.",
    )  # fmt: skip


class TurnSerializer(serializers.Serializer):
    status = serializers.CharField()
    message = MessageSerializer()
    reply = MessageSerializer(allow_null=True)
    duplicate = serializers.BooleanField()


class StopSerializer(serializers.Serializer):
    stopped = serializers.BooleanField()


class FeedbackSerializer(serializers.Serializer):
    rating = serializers.ChoiceField(choices=[1, -1], help_text="1: thumbs up, -1: thumbs down.")
    comment = serializers.CharField(required=False, allow_blank=True, max_length=MAX_COMMENT_CHARS)


class FeedbackResultSerializer(serializers.Serializer):
    message_id = serializers.IntegerField()
    rating = serializers.IntegerField()
    comment = serializers.CharField()


class ConversationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    """Conversations the caller may open: their own (a tenant's owners and admins: all), not plan steps'."""

    serializer_class = ConversationSerializer
    write_scopes = {
        "create": KeyScope.CHAT, "messages": KeyScope.CHAT, "stop": KeyScope.CHAT, "feedback": KeyScope.CHAT,
    }  # fmt: skip
    agent_limited_actions = frozenset(write_scopes)  # with the key's agents only (caller_conversation, _agents_for)

    def get_queryset(self) -> QuerySet[Conversation]:
        if (fake := self.schema_queryset()) is not None:
            return fake
        conversations = Conversation.objects.filter(parent__isnull=True).order_by("-updated_at", "-id")
        if self.action == "list":  # an evaluation run's conversations are opened from its results, never listed
            conversations = conversations.exclude(source=ConversationSource.EVAL)
        if not administers(self.request):
            # A member's list: their own conversations, never a test of an agent's draft (administrators only).
            conversations = conversations.filter(user_id=self.request.user.pk, is_test=False)
        access = key_access(self.request)
        if access is not None:
            conversations = conversations.filter(agent__in=access.agents().values("pk"))
        agent = self.request.query_params.get("agent")
        if agent:
            if not agent.isdigit():
                raise exceptions.ValidationError({"agent": [_("Give an agent id.")]})
            conversations = conversations.filter(agent_id=int(agent))
        return conversations

    def get_object(self) -> Conversation:
        try:
            return caller_conversation(
                conversation_id=int(self.kwargs["pk"]),
                user=self.request.user,
                membership=self.request.membership,
                access=key_access(self.request),
            )
        except (Conversation.DoesNotExist, ValueError):
            raise exceptions.NotFound(_("No such conversation.")) from None

    @extend_schema(request=ConversationCreateSerializer, responses={201: ConversationSerializer})
    def create(self, request: Request) -> Response:
        """Start a conversation with an agent (its published version)."""
        data = ConversationCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        agent = _agents_for(request).filter(pk=data.validated_data["agent"]).first()
        if agent is None:
            raise exceptions.ValidationError({"agent": [_("No such agent for this caller.")]})
        title = data.validated_data.get("title", "")
        conversation = conversation_start(agent=agent, user=request.user, title=title, source=ConversationSource.API)
        return Response(ConversationSerializer(conversation).data, status=status.HTTP_201_CREATED)

    @extend_schema(methods=["GET"], responses={200: page_of(MessageSerializer)})
    @extend_schema(methods=["POST"], request=SendSerializer, responses={200: TurnSerializer})
    @action(detail=True, methods=["get", "post"])
    def messages(self, request: Request, pk: str | None = None) -> Response:
        """GET: the stored messages, oldest first. POST: send a message and wait for the reply (blocking); only the
        conversation's own participant may (engine.admission): anyone else gets 404 `conversation_not_found`."""
        if request.method == "GET":
            conversation = self.get_object()
            page = self.paginate_queryset(Message.objects.filter(conversation=conversation).order_by("id"))
            return self.get_paginated_response(MessageSerializer(page, many=True).data)
        data = request.data if isinstance(request.data, dict) else {}
        client_id = data.get("client_id") or f"api-{uuid.uuid4().hex}"
        attachments = attachment_ids(data.get("attachments"))
        if attachments is None:
            raise exceptions.ValidationError({"attachments": [attachment_ids_words()]})
        return self._send(int(pk or 0), client_id, data.get("content"), attachments)

    @extend_schema(request=FeedbackSerializer, responses={200: FeedbackResultSerializer})
    @action(detail=True, methods=["post"], url_path=r"messages/(?P<message_id>\d+)/feedback")
    def feedback(self, request: Request, pk: str | None = None, message_id: str | None = None) -> Response:
        """Rate a reply of the conversation (thumbs up 1, down -1) with an optional comment; the caller's earlier
        rating of it is replaced. A message of another conversation is a 404."""
        conversation = self.get_object()
        message = Message.objects.filter(pk=int(message_id or 0), conversation=conversation).first()
        if message is None:
            raise exceptions.NotFound(_("No such message."))
        data = FeedbackSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            feedback = feedback_record(
                message=message, user=request.user, rating=int(data.validated_data["rating"]),
                comment=data.validated_data.get("comment", ""), source="api",
            )  # fmt: skip
        except DjangoValidationError as error:
            raise _validation(error) from None
        return Response({"message_id": message.pk, "rating": feedback.rating, "comment": feedback.comment})

    @extend_schema(request=None, responses={200: StopSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        """Stop the reply being written (what was written is stored); `stopped` false when none was running."""
        conversation = self.get_object()
        return Response({"stopped": async_to_sync(turns.request_stop)(conversation_id=conversation.pk)})

    def _send(self, conversation_id: int, client_id: Any, content: Any, attachments: list[int]) -> Response:
        access = key_access(self.request)
        if access is not None:
            caller = access.caller(ConversationSource.API)
        else:
            caller = Caller(tenant=self.request.tenant, source=ConversationSource.API, user=self.request.user,
                            membership=self.request.membership)  # fmt: skip

        async def turn() -> tuple[Admitted | Refusal, Any]:
            decision = await admission.admit(
                caller=caller, target=Target(conversation_id=conversation_id), content=content, client_id=client_id,
                attachments=attachments,
            )  # fmt: skip
            if isinstance(decision, Refusal) or decision.submission.task is None:
                return decision, None
            return decision, await decision.submission.task

        decision, result = async_to_sync(turn)()
        if isinstance(decision, Refusal):
            return refusal_response(decision)
        submission = decision.submission
        reply = result.message if result is not None else submission.reply
        body = {
            "status": str(result.status) if result is not None else "duplicate",
            "message": MessageSerializer(submission.message).data,
            "reply": MessageSerializer(reply).data if reply is not None else None,
            "duplicate": submission.outcome == Outcome.DUPLICATE,
        }
        if result is not None and result.status == TurnStatus.FAILED:
            code = result.error_code or errors.PROVIDER_ERROR
            body["error"] = {"code": code, "message": errors.message_for(code)}
            return Response(body, status=status.HTTP_502_BAD_GATEWAY)
        return Response(body)


def _error(status_code: int, code: str, message: str) -> Response:
    return Response({"error": {"code": code, "message": message}}, status=status_code)
