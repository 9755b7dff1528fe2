from django.urls import path

from knowledge import views

app_name = "knowledge"

urlpatterns = [
    path("", views.knowledge_base_list, name="list"),
    path("new/", views.knowledge_base_new, name="create"),
    path("<int:knowledge_base_id>/", views.knowledge_base_detail, name="detail"),
    path("<int:knowledge_base_id>/edit/", views.knowledge_base_edit, name="edit"),
    path("<int:knowledge_base_id>/delete/", views.knowledge_base_delete_view, name="delete"),
    path("<int:knowledge_base_id>/upload/", views.document_upload, name="upload"),
    path("<int:knowledge_base_id>/progress/", views.document_progress_view, name="progress"),
    path("<int:knowledge_base_id>/search/", views.knowledge_base_search, name="search"),
    path(
        "<int:knowledge_base_id>/reingest-outdated/", views.knowledge_base_reingest_outdated, name="reingest_outdated"
    ),
    path(
        "<int:knowledge_base_id>/documents/<int:document_id>/reingest/",
        views.document_reingest_view,
        name="document_reingest",
    ),
    path(
        "<int:knowledge_base_id>/documents/<int:document_id>/delete/",
        views.document_delete_view,
        name="document_delete",
    ),
]
