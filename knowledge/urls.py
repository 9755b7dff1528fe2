from django.urls import path

app_name = "knowledge"

# The pages are added by the ingestion work (knowledge/views.py).
urlpatterns: list = []
