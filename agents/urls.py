from django.urls import include, path

from agents import views

app_name = "agents"

urlpatterns = [
    path("", views.agent_list, name="list"),
    path("new/", views.agent_new, name="create"),
    path("<int:agent_id>/", views.agent_detail, name="detail"),
    path("<int:agent_id>/edit/", views.agent_edit, name="edit"),
    path("<int:agent_id>/publish/", views.agent_publish_view, name="publish"),
    path("workflows/", include("agents.workflows.urls")),
]
