from django.urls import path

from memory import views

app_name = "memory"

urlpatterns = [
    path("", views.memory_index, name="index"),
    path("events/<int:event_id>/delete/", views.event_delete_view, name="event_delete"),
    path("memories/<int:item_id>/delete/", views.memory_item_delete_view, name="item_delete"),
    path("forget/", views.forget_view, name="forget"),
]
