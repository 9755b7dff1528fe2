"""Admin of a tenant's MCP servers: add one (its headers write-only), refresh its tools, enable them one by one."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import lazy
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_noop
from django.utils.translation import gettext_lazy as _

from core.bounded import BoundedJSONFormField
from core.errortext import error_html
from tenants.admin import TenantOwnedAdmin, TenantOwnedAdminMixin
from tenants.admin_site import is_platform_admin
from toolservers.client import ServerUnavailable
from toolservers.models import ServerTool, ToolServer
from toolservers.services import tools_refresh, url_refused


def _with_code(text: str, **codes: str) -> str:
    """A help text (`text`, a msgid) whose protocol words are code: the admin shows help texts as HTML, and a
    Chinese page shows header names and paths as code, not as words to translate."""

    def render() -> str:
        return gettext(text) % {name: format_html("<code>{}</code>", value) for name, value in codes.items()}

    return lazy(render, str)()


class ToolServerForm(forms.ModelForm):
    """The server form: a bearer token and headers can be replaced or cleared, never read back."""

    bearer_token = forms.CharField(
        label=_("bearer token"),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=_with_code(
            gettext_noop("Sent as %(header)s; stored encrypted and never shown again. Empty: keep."),
            header="Authorization: Bearer …",
        ),
    )
    extra_headers = BoundedJSONFormField(
        label=_("other headers"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60, "style": "font-family: monospace"}),
        help_text=_with_code(
            gettext_noop("A JSON object, e.g. %(example)s; stored encrypted and never shown again. Empty: keep."),
            example='{"X-Api-Key": "…"}',
        ),
    )
    url = forms.URLField(
        label=ToolServer._meta.get_field("url").verbose_name,
        assume_scheme="https",
        max_length=500,
        help_text=_with_code(
            gettext_noop("The server's streamable HTTP endpoint, e.g. %(example)s."), example="https://…/mcp"
        ),
    )
    clear_headers = forms.BooleanField(label=_("Remove the stored token and headers"), required=False)

    class Meta:
        model = ToolServer
        fields = ["tenant", "name", "slug", "url", "timeout_seconds", "private_network_allowed"]

    def clean_extra_headers(self) -> dict[str, str]:
        value = self.cleaned_data.get("extra_headers") or {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise forms.ValidationError(_("Give the headers as a JSON object of strings."))
        return value

    def clean(self):
        cleaned = super().clean()
        candidate = ToolServer(
            url=cleaned.get("url") or "",
            private_network_allowed=cleaned.get("private_network_allowed", self.instance.private_network_allowed),
        )
        if refused := url_refused(candidate):
            self.add_error("url", refused)
        return cleaned

    def headers(self) -> dict[str, str] | None:
        """The headers to store (None: keep the stored ones)."""
        if self.cleaned_data.get("clear_headers"):
            return {}
        token = self.cleaned_data.get("bearer_token")
        extra = self.cleaned_data.get("extra_headers") or {}
        if not token and not extra:
            return None
        return {**extra, **({"Authorization": f"Bearer {token}"} if token else {})}


class ServerToolInline(TenantOwnedAdminMixin, admin.TabularInline):
    model = ServerTool
    fields = ["name", "function_name_code", "description", "enabled", "refreshed_at"]
    readonly_fields = ["name", "function_name_code", "description", "refreshed_at"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # tools come from the server (Refresh tools), never typed in

    @admin.display(description=ServerTool._meta.get_field("function_name").verbose_name)
    def function_name_code(self, obj: ServerTool) -> str:
        """The identifier models call the tool by, as code."""
        return format_html("<code>{}</code>", obj.function_name)


@admin.register(ToolServer)
class ToolServerAdmin(TenantOwnedAdmin):
    form = ToolServerForm
    inlines = [ServerToolInline]
    list_display = ["name", "url", "tool_count", "refreshed_at", "last_error_text"]
    search_fields = ["name", "url"]
    readonly_fields = ["headers_status", "refreshed_at", "last_error_text"]
    actions = ["refresh_tools"]
    fieldsets = [
        (None, {"fields": ["tenant", "name", "slug", "url", "timeout_seconds", "private_network_allowed"]}),
        (_("Credentials"), {"fields": ["headers_status", "bearer_token", "extra_headers", "clear_headers"]}),
        (_("Tools"), {"fields": ["refreshed_at", "last_error_text"]}),
    ]

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        readonly = list(super().get_readonly_fields(request, obj))
        # A tenant admin must not open the platform's own network to the tenant's requests.
        return readonly if is_platform_admin(request) else [*readonly, "private_network_allowed"]

    @admin.display(description=_("token and headers"))
    def headers_status(self, obj: ToolServer | None) -> str:
        return gettext("set") if obj is not None and obj.has_headers else gettext("not set")

    @admin.display(description=ToolServer._meta.get_field("last_error").verbose_name)
    def last_error_text(self, obj: ToolServer | None) -> str:
        """The last error with its technical detail as code (core.errortext)."""
        return error_html(obj.last_error) if obj is not None else ""

    @admin.display(description=_("tools (enabled)"))
    def tool_count(self, obj: ToolServer) -> str:
        tools = list(obj.tools.values_list("enabled", flat=True))
        return f"{len(tools)} ({sum(tools)})"

    def save_model(self, request: HttpRequest, obj: ToolServer, form, change: bool) -> None:
        headers = form.headers()
        if headers is not None:
            obj.set_headers(headers)
        super().save_model(request, obj, form, change)
        if not change:
            self._refresh(request, obj)

    @admin.action(description=_("Refresh tools (ask the servers what they offer)"))
    def refresh_tools(self, request: HttpRequest, queryset: QuerySet[ToolServer]) -> None:
        for server in queryset:
            self._refresh(request, server)

    def _refresh(self, request: HttpRequest, server: ToolServer) -> None:
        try:
            tools = tools_refresh(server)
        except ServerUnavailable as exc:
            messages.error(request, error_html(str(exc)))
            return
        messages.success(
            request,
            gettext("%(server)s lists %(count)s tools; enable those agents may use.")
            % {"server": server.name, "count": len(tools)},
        )
        if server.last_error:  # tools dropped or shortened, and why (toolservers.screening)
            messages.warning(request, error_html(f"{server.name}: {server.last_error}"))
