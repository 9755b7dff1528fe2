from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from api import rest, rest_attachments, rest_evals, rest_knowledge, rest_plans, streaming, unknown_url, views

app_name = "api"

router = DefaultRouter()
# No `.json`-style suffix URLs: the API speaks JSON only, and the viewsets' actions take no `format` argument (a
# suffix URL was a 500 before).
router.include_format_suffixes = False
router.register("agents", rest.AgentViewSet, basename="agent")
router.register("attachments", rest_attachments.AttachmentViewSet, basename="attachment")
router.register("conversations", rest.ConversationViewSet, basename="conversation")
router.register("eval-cases", rest_evals.EvalCaseViewSet, basename="eval-case")
router.register("eval-compare", rest_evals.EvalCompareViewSet, basename="eval-compare")
router.register("eval-datasets", rest_evals.EvalDatasetViewSet, basename="eval-dataset")
router.register("eval-runs", rest_evals.EvalRunViewSet, basename="eval-run")
router.register("feedback", rest_evals.FeedbackEvalCaseViewSet, basename="feedback")
router.register("knowledge-bases", rest_knowledge.KnowledgeBaseViewSet, basename="knowledge-base")
router.register("plans", rest_plans.PlanViewSet, basename="plan")
router.register("usage", rest_plans.UsageViewSet, basename="usage")
router.register("workflows", rest.WorkflowViewSet, basename="workflow")

urlpatterns = [
    path("keys/", views.key_list, name="keys"),
    path("keys/<int:key_id>/revoke/", views.key_revoke_view, name="revoke"),
    path("v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's start-up script as a file: the Content-Security-Policy allows no inline one.
    path("v1/docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="swagger"),
    path("v1/redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    path("v1/conversations/<int:conversation_id>/messages/stream/", streaming.send_stream, name="conversation-stream"),
    path(
        "v1/agents/<int:agent_id>/eval-datasets/",
        rest_evals.AgentEvalDatasetViewSet.as_view({"get": "list", "post": "create"}),
        name="agent-eval-datasets",
    ),
    path("v1/", include(router.urls)),
    # Every other /api/v1 URL answers the API's JSON error (404), never an HTML page.
    re_path(r"^v1(?:/.*)?$", unknown_url.unknown_url, name="unknown-url"),
]
