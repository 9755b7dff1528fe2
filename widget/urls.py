from django.urls import path

from widget import views

app_name = "widget"

urlpatterns = [
    path("embed.js", views.embed_script, name="script"),
    path("embed/<str:token>/", views.frame, name="frame"),
    path("embed/<str:token>/chat/", views.chat, name="chat"),
    path("embed/<str:token>/messages/<int:message_id>/feedback/", views.feedback, name="feedback"),
    path("embed/<str:token>/attachments/", views.upload, name="attachment-upload"),
    path("embed/<str:token>/attachments/<int:attachment_id>/", views.attachment, name="attachment"),
]
