from django.urls import path

from agents.workflows import views

app_name = "workflows"

urlpatterns = [
    path("", views.workflow_list_view, name="list"),
    path("new/", views.workflow_new, name="create"),
    path("import/", views.workflow_import, name="import"),
    path("<int:workflow_id>/", views.workflow_edit, name="edit"),
    path("<int:workflow_id>/runs/", views.workflow_runs_view, name="runs"),
    path("<int:workflow_id>/runs/<int:run_id>/", views.workflow_run_view, name="run"),
    path("<int:workflow_id>/export/", views.workflow_export, name="export"),
    path("agents/<int:agent_id>/export/", views.agent_export_view, name="agent_export"),
    path("agents/import/", views.agent_import_view, name="agent_import"),
]
