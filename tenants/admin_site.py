from __future__ import annotations

from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from django.contrib.contenttypes.views import shortcut
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.translation import gettext_lazy as _

from tenants.models import TenantOwned


def is_platform_admin(request: HttpRequest) -> bool:
    """A platform superuser: sees and edits every tenant in the admin."""
    return bool(request.user.is_active and request.user.is_superuser)


def is_tenant_admin(request: HttpRequest) -> bool:
    """A staff user who owns or administers the active tenant: sees and edits that tenant only."""
    membership = getattr(request, "membership", None)
    return bool(request.user.is_active and request.user.is_staff and membership and membership.can_administer)


class PlatformAdminSite(admin.AdminSite):
    """The control room: platform superusers see all tenants; tenant owners and admins see their own."""

    site_header = _("Agent platform control room")
    site_title = _("Agent platform")
    index_title = _("Control room")

    def has_permission(self, request: HttpRequest) -> bool:
        return is_platform_admin(request) or is_tenant_admin(request)

    def get_urls(self) -> list[URLPattern]:
        # "View on site" (r/<content type>/<id>/) reads the object through the unscoped base manager: for another
        # tenant's id its answer told whether that id exists. Checked in the request's tenant scope first.
        return [
            path("r/<int:content_type_id>/<path:object_id>/", self.admin_view(self.view_on_site), name="view_on_site"),
            *[pattern for pattern in super().get_urls() if getattr(pattern, "name", None) != "view_on_site"],
        ]

    def view_on_site(self, request: HttpRequest, content_type_id: int, object_id: str) -> HttpResponse:
        content_type = ContentType.objects.filter(pk=content_type_id).first()
        model = content_type.model_class() if content_type is not None else None
        if model is None:
            raise Http404(_("Nothing to show on the site."))
        if issubclass(model, TenantOwned) and not is_platform_admin(request):
            try:
                visible = model.objects.filter(pk=object_id).exists()
            except (ValueError, TypeError):
                visible = False
            if not visible:
                raise Http404(_("Nothing to show on the site."))
        return shortcut(request, content_type_id, object_id)
