"""Tenant API keys (T4): what a program presents instead of a session."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from tenants.models import TenantOwned


class KeyScope(models.TextChoices):
    READ = "read", _("read: list and read agents, conversations, plans and knowledge bases")
    CHAT = "chat", _("chat: send messages, run workflows (the OpenAI-compatible endpoint needs it)")
    WRITE = "write", _("write: create and change agents, knowledge bases and documents")
    MCP = "mcp", _("mcp: use the agents as tools of an MCP client at /mcp (Claude Desktop, Cursor…)")


def default_scopes() -> list[str]:
    return [KeyScope.READ.value, KeyScope.CHAT.value]


class ApiKey(TenantOwned):
    """A key of one tenant. The secret is shown once when the key is made; only its SHA-256 is kept. Requests with
    the key act as the member who made it, narrowed by its scopes and, when some are chosen, to those agents."""

    name = models.CharField(_("name"), max_length=120, help_text=_("What the key is for, e.g. the program using it."))
    prefix = models.CharField(_("prefix"), max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(_("secret hash"), max_length=64, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="+",
        verbose_name=_("acts as"),
        help_text=_("Requests with the key act as this member; the key stops working if they leave the tenant."),
    )
    scopes = models.JSONField(_("scopes"), default=default_scopes)
    agents = models.ManyToManyField(
        "agents.Agent",
        blank=True,
        related_name="+",
        verbose_name=_("agents"),
        help_text=_("Leave empty for every agent of the tenant."),
    )
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True, help_text=_("Empty: never."))
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True, editable=False)
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("API key")
        verbose_name_plural = _("API keys")

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())

    def has_scope(self, scope: str) -> bool:
        return scope in (self.scopes or [])
