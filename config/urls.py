from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from config.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
    path("agents/", include("agents.urls")),
    path("chat/", include("chat.urls")),
    path("plans/", include("plans.urls")),
    path("knowledge/", include("knowledge.urls")),
    path("", include("tenants.urls")),
]
