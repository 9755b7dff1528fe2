"""The `http_request` tool (A6): HTTP calls to the hosts on the tenant's allow-list, and nowhere else.

Safety rules (docs/tools.md): the host must be on the active tenant's allow-list (ToolHttpAllowedHost); every
address the name resolves to must lie outside HTTP_TOOL_BLOCKED_NETWORKS (core.netguard); the request then goes to
the checked address (Host header and TLS server name set to the name), so DNS rebinding between check and request cannot
reach an internal host; each redirect is checked the same way; a total timeout and a response size limit apply.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from typing import Any

import httpx
from django.utils.translation import gettext as _

from agents.models import ToolHttpAllowedHost
from agents.tools.base import Tool, ToolCallContext, ToolError, ToolResult
from agents.tools.registry import register_tool
from core.conf import setting
from core.db import database_sync_to_async
from core.netguard import (
    DEFAULT_BLOCKED_NETWORKS,
    Pinned,
    address_blocked,
    bounded_body,
    networks,
    pinned_response,
    resolve_host,
)
from tenants.models import Tenant
from tenants.scope import tenant_scope

MAX_REDIRECTS = 5

_DROPPED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "upgrade"}


def blocked_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return networks(setting("HTTP_TOOL_BLOCKED_NETWORKS") or DEFAULT_BLOCKED_NETWORKS)


def host_matches(host: str, pattern: str) -> bool:
    """`pattern` is a host name ("api.example.com") or a wildcard for its subdomains ("*.example.com")."""
    host, pattern = host.lower().rstrip("."), pattern.lower().rstrip(".")
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def _allowed_patterns(tenant: Tenant) -> list[str]:
    with tenant_scope(tenant):
        return list(ToolHttpAllowedHost.objects.filter(tenant=tenant).values_list("host", flat=True))


async def _check_url(url: httpx.URL, patterns: list[str]) -> Pinned:
    """The URL's host checked against the allow-list and resolved to an address outside the blocked networks."""
    if url.scheme not in ("http", "https"):
        raise ToolError(_("Only http:// and https:// URLs can be requested, not %(url)s.") % {"url": url})
    host = url.raw_host.decode("ascii").lower().strip("[]")
    if not host:
        raise ToolError(_("The URL %(url)s has no host name.") % {"url": url})
    if not any(host_matches(host, pattern) for pattern in patterns):
        raise ToolError(
            _(
                "The host %(host)s is not on this organisation's list of allowed hosts; an administrator can add "
                "it under Admin > Allowed HTTP hosts. Tell the user the request cannot be made."
            )
            % {"host": host}
        )
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        addresses = await asyncio.to_thread(resolve_host, host, port)
    except (OSError, UnicodeError):
        addresses = []
    if not addresses:
        raise ToolError(_("The host name %(host)s could not be resolved.") % {"host": host})
    networks = blocked_networks()
    if any(address_blocked(address, networks) for address in addresses):
        raise ToolError(
            _("The host %(host)s resolves to a private or reserved address; such addresses cannot be requested.")
            % {"host": host}
        )
    return Pinned(url=url, host=host, address=addresses[0])


def _content(response: httpx.Response, body: bytes) -> Any:
    text = body.decode(response.encoding or "utf-8", errors="replace")
    if "json" in response.headers.get("content-type", ""):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


async def _fetch(
    method: str, url: httpx.URL, headers: dict[str, str], body: Any, patterns: list[str], timeout: float
) -> dict:
    max_bytes = int(setting("HTTP_TOOL_MAX_BYTES"))

    async def check(hop: httpx.URL) -> Pinned:
        return await _check_url(hop, patterns)

    def too_many() -> ToolError:
        return ToolError(_("Too many redirects (more than %(count)s).") % {"count": MAX_REDIRECTS})

    async with httpx.AsyncClient(follow_redirects=False, trust_env=False, timeout=timeout) as client:
        pinned = pinned_response(
            client, method, url, check=check, too_many_redirects=too_many, max_redirects=MAX_REDIRECTS,
            headers=headers, json=body,
        )  # fmt: skip
        async with pinned as (final, response):
            content = await bounded_body(
                response,
                max_bytes,
                lambda: ToolError(
                    _("The response of %(url)s is larger than %(limit)s bytes; request a smaller resource.")
                    % {"url": final, "limit": max_bytes}
                ),
            )
            return {
                "status": response.status_code,
                "url": str(final),
                "content_type": response.headers.get("content-type", ""),
                "body": _content(response, content),
            }


@register_tool
class HttpRequestTool(Tool):
    name = "http_request"
    label_en = "HTTP request"
    label_zh = "HTTP 请求"
    description_en = (
        "Make an HTTP GET or POST request to a web API on the organisation's list of allowed hosts and return the "
        "status and the body. Other hosts and private addresses are refused."
    )
    description_zh = (
        "向本组织允许列表中的主机发送 HTTP GET 或 POST 请求，返回状态码和响应内容。其他主机和内网地址会被拒绝。"
    )
    parameters = {
        "type": "object",
        "properties": {
            "method": {"type": "string", "enum": ["GET", "POST"], "description": "GET or POST / 请求方法"},
            "url": {"type": "string", "description": "The full http(s) URL / 完整的 http(s) 地址"},
            "headers": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Extra request headers / 额外的请求头",
            },
            "json": {"description": "A JSON body for POST / POST 的 JSON 请求体"},
        },
        "required": ["method", "url"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], call: ToolCallContext) -> ToolResult:
        method = arguments["method"].upper()
        try:
            url = httpx.URL(arguments["url"])
        except (httpx.InvalidURL, TypeError):
            raise ToolError(_("%(url)s is not a valid URL.") % {"url": arguments["url"]}) from None
        headers = {
            str(key): str(value)
            for key, value in (arguments.get("headers") or {}).items()
            if str(key).lower() not in _DROPPED_HEADERS
        }
        patterns = await database_sync_to_async(_allowed_patterns)(call.tenant)
        timeout = float(setting("HTTP_TOOL_TIMEOUT"))
        try:
            result = await asyncio.wait_for(
                _fetch(method, url, headers, arguments.get("json"), patterns, timeout), timeout
            )
        except TimeoutError:
            raise ToolError(
                _("%(url)s did not answer within %(seconds)s seconds.") % {"url": url, "seconds": timeout}
            ) from None
        except httpx.HTTPError as exc:
            raise ToolError(_("The request to %(url)s failed: %(error)s") % {"url": url, "error": exc}) from None
        return ToolResult(content=result)
