"""The evaluation pages, under /evals/ (evals.views)."""

from django.urls import path

from evals import views

app_name = "evals"

urlpatterns = [
    path("agents/<int:agent_id>/", views.dataset_list, name="datasets"),
    path("agents/<int:agent_id>/new/", views.dataset_new, name="dataset_new"),
    path("agents/<int:agent_id>/gate/", views.gate_edit, name="gate"),
    path("datasets/<int:dataset_id>/", views.dataset_detail, name="dataset"),
    path("datasets/<int:dataset_id>/edit/", views.dataset_edit, name="dataset_edit"),
    path("datasets/<int:dataset_id>/delete/", views.dataset_delete_view, name="dataset_delete"),
    path("datasets/<int:dataset_id>/import/", views.dataset_import, name="dataset_import"),
    path("datasets/<int:dataset_id>/export/", views.dataset_export, name="dataset_export"),
    path("datasets/<int:dataset_id>/cases/new/", views.case_new, name="case_new"),
    path("datasets/<int:dataset_id>/run/", views.run_start_view, name="run_start"),
    path("cases/<int:case_id>/", views.case_edit, name="case_edit"),
    path("cases/<int:case_id>/delete/", views.case_delete_view, name="case_delete"),
    path("runs/<int:eval_run_id>/", views.run_detail, name="run"),
    path("runs/<int:eval_run_id>/progress/", views.run_progress_view, name="run_progress"),
    path("runs/<int:eval_run_id>/stop/", views.run_stop_view, name="run_stop"),
    path("compare/", views.compare_view, name="compare"),
    # The chat page's button on a 👎 reply (templates/chat/_feedback.html): the viewer's rating becomes a case.
    path("messages/<int:message_id>/case/", views.case_from_message, name="case_from_message"),
]
