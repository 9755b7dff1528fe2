from django.urls import path

from chat import attachments, views

app_name = "chat"

urlpatterns = [
    path("", views.conversation_list, name="list"),
    path("new/", views.conversation_start, name="start"),
    path("<int:conversation_id>/", views.conversation_detail, name="conversation"),
    path("messages/<int:message_id>/feedback/", views.message_feedback, name="feedback"),
    path("attachments/", attachments.upload, name="attachment-upload"),
    path("attachments/<int:attachment_id>/", attachments.content, name="attachment"),
]
