from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView

from api import mcp_oauth, openai_compat
from config.health import healthz
from config.redoc import redoc_bundle

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    # Browsers ask for /favicon.ico on pages that name no icon (the admin's): the site's icon, not a 404. Its URL is
    # looked up at the request (lazy): loading the URLconf, as migrate's checks do, must not need the static
    # files' manifest, which only collectstatic writes.
    path("favicon.ico", RedirectView.as_view(url=lazy(static, str)("favicon.svg"), permanent=False), name="favicon"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
    path("agents/", include("agents.urls")),
    path("chat/", include("chat.urls")),
    path("plans/", include("plans.urls")),
    path("knowledge/", include("knowledge.urls")),
    path("memory/", include("memory.urls")),
    path("evals/", include("evals.urls")),
    path("api/", include("api.urls")),
    # /mcp takes API keys, not OAuth: what an OAuth-minded MCP client (mcp-remote) asks for says so (api.mcp_oauth).
    path(".well-known/oauth-protected-resource", mcp_oauth.protected_resource),
    path(".well-known/oauth-protected-resource/<path:resource>", mcp_oauth.protected_resource),
    path(".well-known/oauth-authorization-server", mcp_oauth.authorization_server),
    path("mcp/oauth/register", mcp_oauth.register),
    path("mcp/oauth/token", mcp_oauth.token),
    # ReDoc's bundle without its CDN logo (config.redoc), for templates/drf_spectacular/redoc.html.
    path("api/redoc.standalone.js", redoc_bundle, name="redoc-bundle"),
    # The OpenAI-compatible endpoint: base URL <site>/v1 for the openai SDK and its kin.
    path("v1/models", openai_compat.models, name="openai-models"),
    path("v1/models/<str:model_id>", openai_compat.model, name="openai-model"),
    path("v1/chat/completions", openai_compat.chat_completions, name="openai-chat-completions"),
    # The website widget: /embed.js and the framed pages /embed/<token>/ (docs/embed.md).
    path("", include("widget.urls")),
    # Every other /v1 path answers OpenAI's error object (404), never an HTML page.
    path("v1", openai_compat.unknown, name="openai-unknown-root"),
    path("v1/<path:rest>", openai_compat.unknown, name="openai-unknown"),
    path("", include("tenants.urls")),
]
