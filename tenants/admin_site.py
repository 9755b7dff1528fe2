from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _


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
