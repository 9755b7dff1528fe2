from django.urls import path

from tenants import views

urlpatterns = [
    path("", views.home, name="home"),
    path("tenants/switch/", views.switch_tenant, name="switch_tenant"),
]
