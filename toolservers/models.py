"""A tenant's MCP servers (streamable HTTP) and the tools each lists; secrets encrypted like provider keys."""

from __future__ import annotations

import json
import re

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from llm import crypto
from tenants.models import TenantOwned

# What an OpenAI function name may hold (and its length): an MCP tool is offered to models under such a name.
_FUNCTION_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_-]")
FUNCTION_NAME_MAX = 64
FUNCTION_PREFIX = "mcp__"


def function_name(server_slug: str, tool_name: str) -> str:
    """The name models call an MCP tool by: `mcp__<server slug>__<tool>`, within OpenAI's function-name rules."""
    name = f"{FUNCTION_PREFIX}{server_slug}__{tool_name}"
    return _FUNCTION_NAME_CHARACTERS.sub("_", name)[:FUNCTION_NAME_MAX]


class ToolServer(TenantOwned):
    """An MCP server reached over streamable HTTP. Its headers (a bearer token among them) are stored encrypted and
    never shown again."""

    name = models.CharField(_("name"), max_length=100)
    slug = models.SlugField(
        _("short name"),
        max_length=24,
        help_text=_("Letters, digits, - and _: part of the names models call this server's tools by."),
    )
    url = models.URLField(_("URL"), max_length=500, help_text=_("The server's streamable HTTP endpoint, e.g. …/mcp."))
    headers_encrypted = models.TextField(_("headers (encrypted)"), blank=True, editable=False)
    timeout_seconds = models.FloatField(
        _("timeout (seconds)"),
        default=20.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(600)],
        help_text=_("How long one call to the server may take (the agents' tool timeout applies too)."),
    )
    private_network_allowed = models.BooleanField(
        _("private network allowed"),
        default=False,
        help_text=_("Let the URL be a private or loopback address. Only the platform operator can set this."),
    )
    refreshed_at = models.DateTimeField(_("tools listed at"), null=True, blank=True, editable=False)
    last_error = models.TextField(_("last error"), blank=True, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("MCP server")
        verbose_name_plural = _("MCP servers")
        constraints = [models.UniqueConstraint(fields=["tenant", "slug"], name="toolservers_unique_slug")]

    def __str__(self) -> str:
        return self.name

    # The headers go in through set_headers() and out through headers(); nothing renders them.
    def set_headers(self, headers: dict[str, str]) -> None:
        self.headers_encrypted = crypto.encrypt(json.dumps(headers)) if headers else ""

    def headers(self) -> dict[str, str]:
        return json.loads(crypto.decrypt(self.headers_encrypted)) if self.headers_encrypted else {}

    @property
    def has_headers(self) -> bool:
        return bool(self.headers_encrypted)


class ServerTool(TenantOwned):
    """A tool a server listed when last asked; agents may use it once an administrator enables it."""

    server = models.ForeignKey(ToolServer, on_delete=models.CASCADE, related_name="tools", verbose_name=_("server"))
    name = models.CharField(_("name"), max_length=200)
    function_name = models.CharField(_("name for models"), max_length=FUNCTION_NAME_MAX, editable=False)
    description = models.TextField(_("description"), blank=True)
    input_schema = models.JSONField(_("input schema"), default=dict)
    enabled = models.BooleanField(_("enabled"), default=False)
    refreshed_at = models.DateTimeField(_("listed at"))

    class Meta:
        ordering = ["server__name", "name"]
        verbose_name = _("MCP tool")
        verbose_name_plural = _("MCP tools")
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="toolservers_unique_tool"),
            models.UniqueConstraint(fields=["tenant", "function_name"], name="toolservers_unique_function"),
        ]

    def __str__(self) -> str:
        return f"{self.server.name} › {self.name}"
