"""Embed tokens in the admin: a tenant's administrators publish an agent on websites, see the snippet to paste, and
revoke a token (docs/embed.md)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tenants.admin import TenantOwnedAdmin
from widget import visitors
from widget.models import EmbedToken


def snippet_for(embed: EmbedToken, site: str) -> str:
    """The tag a website pastes to show the widget."""
    return f'<script src="{site}/embed.js" data-token="{embed.token}" async></script>'


@admin.register(EmbedToken)
class EmbedTokenAdmin(TenantOwnedAdmin):
    list_display = ["name", "agent", "visitor_messages_per_hour", "daily_token_budget", "tokens_today", "live",
                    "created_at"]  # fmt: skip
    list_filter = ["agent"]
    list_select_related = ["agent"]
    search_fields = ["name"]
    fields = ["tenant", "agent", "name", "allowed_origins", "visitor_messages_per_hour", "daily_token_budget",
              "show_token_usage", "files_allowed", "max_file_mb", "snippet", "revoked_at", "created_at"]  # fmt: skip
    readonly_fields = ["snippet", "revoked_at", "created_at"]
    actions = ["revoke"]

    @admin.display(description=_("snippet to paste"))
    def snippet(self, obj: EmbedToken) -> str:
        if obj.pk is None:
            return _("Saved tokens show the snippet here.")
        request = getattr(self, "_request", None)
        site = request.build_absolute_uri("/").rstrip("/") if request is not None else ""
        return format_html("<code class='embed-snippet'>{}</code>", snippet_for(obj, site))

    @admin.display(description=_("tokens today"))
    def tokens_today(self, obj: EmbedToken) -> int:
        return visitors.tokens_used_today(obj)

    @admin.display(description=_("live"), boolean=True)
    def live(self, obj: EmbedToken) -> bool:
        return obj.revoked_at is None

    def get_form(self, request: HttpRequest, obj=None, **kwargs):
        self._request = request  # the snippet names this site's address
        return super().get_form(request, obj, **kwargs)

    @admin.action(description=_("Revoke the selected embed tokens"))
    def revoke(self, request: HttpRequest, queryset: QuerySet[EmbedToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(
            request,
            ngettext("%(count)d embed token revoked.", "%(count)d embed tokens revoked.", count) % {"count": count},
            messages.SUCCESS,
        )
