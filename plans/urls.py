from django.urls import path

from plans import views

app_name = "plans"

urlpatterns = [
    path("records/<uuid:record_id>/", views.record_detail, name="record"),
    path("<uuid:plan_id>/log/", views.plan_log, name="log"),
]
