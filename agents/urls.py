from django.urls import include, path

from agents import views
from agents.goal import views as goal_views

app_name = "agents"

urlpatterns = [
    path("", views.agent_list, name="list"),
    path("new/", views.agent_new, name="create"),
    path("<int:agent_id>/", views.agent_detail, name="detail"),
    path("<int:agent_id>/edit/", views.agent_edit, name="edit"),
    path("<int:agent_id>/publish/", views.agent_publish_view, name="publish"),
    path("<int:agent_id>/try/", views.agent_try_draft, name="try_draft"),
    path("workflows/", include("agents.workflows.urls")),
    # Long-lived goal agents: their runs.
    path("goals/", goal_views.goal_list, name="goal_list"),
    path("<int:agent_id>/goals/new/", goal_views.goal_start, name="goal_start"),
    path("goals/<int:goal_run_id>/", goal_views.goal_run, name="goal_run"),
    path("goals/<int:goal_run_id>/state/", goal_views.goal_run_state, name="goal_run_state"),
    path("goals/<int:goal_run_id>/stop/", goal_views.goal_run_stop_view, name="goal_run_stop"),
    path("goals/<int:goal_run_id>/answer/", goal_views.goal_run_answer_view, name="goal_run_answer"),
]
