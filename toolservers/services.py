"""Saving MCP servers and refreshing the tools they list (sync: the admin's side)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from core.conf import setting
from core.netguard import UnresolvedHost, check_url
from tenants.models import Tenant
from tenants.scope import tenant_scope
from toolservers.client import MAX_LIST_PAGES, Connection, Listing, ServerUnavailable, list_tools
from toolservers.models import ServerTool, ToolServer, function_name
from toolservers.screening import Bounds, screen


def private_allowed(server: ToolServer) -> bool:
    return server.private_network_allowed or bool(setting("MCP_ALLOW_PRIVATE_URLS"))


def connection_for(server: ToolServer) -> Connection:
    """How to reach `server` (its headers decrypted here, for the call only)."""
    return Connection(
        name=server.name,
        url=server.url,
        headers=server.headers(),
        timeout=float(server.timeout_seconds),
        private_allowed=private_allowed(server),
        server_id=server.pk,
    )


def url_refused(server: ToolServer) -> str | None:
    """Why `server`'s URL may not be used (checked when it is saved; calls check again), or None."""
    if private_allowed(server) or not server.url:
        return None
    try:
        checked = check_url(server.url)
    except UnresolvedHost as exc:
        return _("The host name %(host)s does not resolve to an address here; check the URL for a typo.") % {
            "host": exc.host or server.url
        }
    if checked.private:
        return _(
            "This URL is a private, loopback or link-local address; the platform does not send tenants' requests "
            "there. The platform operator can allow it for this server."
        )
    return None


def tools_refresh(server: ToolServer) -> list[ServerTool]:
    """Ask the server for its tools and keep them: new ones disabled, known ones updated (their enabled flag kept),
    vanished ones removed; those out of bounds are dropped or shortened (toolservers.screening), which the server's
    last error then says (also set on `server`). Raises ServerUnavailable (its message also kept as the last
    error)."""
    # The admin is sync and the `mcp` client async: async_to_sync runs the call on an event loop of its own (or on
    # the server's loop when called from a request thread of an ASGI server), and waits for it.
    try:
        listing = async_to_sync(list_tools)(connection_for(server))
    except ServerUnavailable as exc:
        with tenant_scope(server.tenant):
            ToolServer.objects.filter(pk=server.pk).update(last_error=str(exc))
        raise
    return _keep(server, listing)


@transaction.atomic
def _keep(server: ToolServer, listing: Listing) -> list[ServerTool]:
    now = timezone.now()
    bounds = Bounds.configured(list_pages=MAX_LIST_PAGES)
    with tenant_scope(server.tenant):
        others = ServerTool.objects.filter(tenant=server.tenant).exclude(server=server)
        taken = set(others.values_list("function_name", flat=True))
        screened = screen(listing, slug=server.slug, taken=taken, bounds=bounds)
        listed = screened.kept
        known = {tool.name: tool for tool in ServerTool.objects.filter(server=server)}
        ServerTool.objects.filter(server=server).exclude(name__in=[tool.name for tool in listed]).delete()
        kept = []
        for item in listed:
            tool = known.get(item.name) or ServerTool(tenant=server.tenant, server=server, name=item.name)
            tool.description = item.description
            tool.input_schema = item.input_schema or {"type": "object", "properties": {}}
            tool.function_name = function_name(server.slug, item.name)
            tool.refreshed_at = now
            tool.save()
            kept.append(tool)
        server.refreshed_at, server.last_error = now, screened.report(bounds)
        ToolServer.objects.filter(pk=server.pk).update(refreshed_at=now, last_error=server.last_error)
    return kept


def enabled_tools(tenant: Tenant) -> list[ServerTool]:
    """The tenant's enabled MCP tools with their servers, by server then name."""
    with tenant_scope(tenant):
        return list(ServerTool.objects.filter(enabled=True).select_related("server"))
