"""Embed tokens: an agent published on other websites as a chat widget (docs/embed.md)."""

from __future__ import annotations

import secrets

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from core.conf import setting
from tenants.models import TenantOwned

TOKEN_BYTES = 24


def new_token() -> str:
    """A random, unguessable embed token (it is public in the snippet, but cannot be enumerated)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def normalize_origin(value: str) -> str:
    """`https://Example.com/` as `https://example.com`; ValidationError for anything but scheme://host[:port]."""
    text = value.strip().rstrip("/")
    scheme, _sep, rest = text.partition("://")
    if scheme.lower() not in ("http", "https") or not rest or "/" in rest or "?" in rest or "#" in rest:
        raise ValidationError(_("%(origin)s is not an origin (scheme://host[:port])."), params={"origin": value})
    return f"{scheme.lower()}://{rest.lower()}"


class EmbedToken(TenantOwned):
    """One publication of an agent on the web: the token in the snippet, the origins allowed to embed it, the
    per-visitor message rate, the daily token budget and whether visitors see each reply's tokens. Several per
    agent; revoked ones stop at once."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="embeds", verbose_name=_("agent"))
    name = models.CharField(_("name"), max_length=100, help_text=_("Where it is used, e.g. the support site."))
    token = models.CharField(_("token"), max_length=64, unique=True, default=new_token, editable=False)
    allowed_origins = models.TextField(
        _("allowed origins"),
        help_text=_("One origin per line, e.g. https://www.example.com: the only sites that may show the widget."),
    )
    visitor_messages_per_hour = models.PositiveIntegerField(
        _("messages per visitor per hour"), default=20, help_text=_("0: no limit.")
    )
    daily_token_budget = models.PositiveIntegerField(
        _("daily token budget"),
        default=200_000,
        help_text=_("Tokens (prompt + completion) the widget's replies may use per day (UTC); 0: no limit."),
    )
    show_token_usage = models.BooleanField(
        _("show token usage to visitors"),
        default=False,
        help_text=_(
            "Show the tokens (prompt + completion) under each reply in the widget. Off: visitors never see them."
        ),
    )
    files_allowed = models.BooleanField(
        _("visitors may attach files"),
        default=False,
        help_text=_("Show the attach button in the widget: visitors may send images and documents with a message."),
    )
    max_file_mb = models.PositiveIntegerField(
        _("largest file (MB)"),
        default=5,
        validators=[MinValueValidator(1)],
        help_text=_("The largest file a visitor may attach, at most the platform's limit (ATTACHMENT_MAX_BYTES)."),
    )
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("embed token")
        verbose_name_plural = _("embed tokens")

    def __str__(self) -> str:
        return self.name

    def max_file_bytes(self) -> int:
        """The largest file a visitor may attach: the embed's limit within the platform's."""
        return min(self.max_file_mb * 1024 * 1024, int(setting("ATTACHMENT_MAX_BYTES")))

    def origins(self) -> list[str]:
        """The allowed origins, normalized (invalid lines are refused when saved)."""
        return [normalize_origin(line) for line in self.allowed_origins.splitlines() if line.strip()]

    def clean(self) -> None:
        super().clean()
        lines = [line for line in self.allowed_origins.splitlines() if line.strip()]
        if not lines:
            raise ValidationError({"allowed_origins": _("Name at least one origin.")})
        try:
            self.allowed_origins = "\n".join(normalize_origin(line) for line in lines)
        except ValidationError as error:
            raise ValidationError({"allowed_origins": error.messages}) from None
