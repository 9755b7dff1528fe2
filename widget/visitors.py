"""What a website visitor may do through an embed token: which token a request names, whether its page's origin
is allowed, the signed ticket a framed page hands its socket, the visitor's own account and conversation, the
message rate and the daily budget (docs/embed.md).

A visitor is anonymous: the widget keeps a random id in the iframe's storage. The platform keeps only a hash of it,
as the visitor's inactive account `visitor-<embed>-<hash>` (never a member of a tenant, never able to log in), so a
conversation has its owner and long-term memory, keyed by user, is per visitor."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.core import signing
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from core.bounded import unstorable
from core.conf import setting
from engine.admission import VisitorPass, embed_tokens_today, visitor_hash
from memory.models import Conversation, ConversationSource, Visitor
from tenants.scope import all_tenants, tenant_scope
from widget.models import EmbedToken, normalize_origin

VISITOR_ID = re.compile(r"^[0-9a-f]{32}$")
TICKET_SALT = "widget.ticket"
LANGUAGES = ("en", "zh-hans")


def token_lookup(token: str) -> EmbedToken | None:
    """The live (not revoked) embed token `token` of any tenant, with its agent and tenant; None otherwise. The
    one place the widget reads across tenants: the token names its tenant."""
    if not token or len(token) > 64:
        return None
    with all_tenants(reason="an embed token names its tenant"):
        return (
            EmbedToken.objects.select_related("agent", "tenant")
            .filter(token=token, revoked_at__isnull=True, agent__active=True)
            .first()
        )


def origin_of(url: str | None) -> str | None:
    """The origin of a URL (a Referer or an Origin header), normalized; None if it has none."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    try:
        return normalize_origin(f"{parts.scheme}://{parts.netloc}")
    except ValidationError:
        return None


def allowed_origin(embed: EmbedToken, headers: Any) -> str | None:
    """The embedding page's origin if the embed allows it: the Origin header, else the Referer's origin (a framed
    page's request carries the host page in its Referer). None: refused, or nothing said."""
    origin = origin_of(headers.get("Origin")) or origin_of(headers.get("Referer"))
    return origin if origin is not None and origin in embed.origins() else None


def language(value: str | None) -> str:
    """zh-hans for a Chinese page language (zh, zh-CN, zh-Hans...), else en."""
    return "zh-hans" if (value or "").strip().lower().startswith("zh") else "en"


@dataclass(frozen=True)
class Ticket:
    """What a framed page proved when it loaded: its embed, the allowed origin that framed it, its language."""

    embed_id: int
    origin: str
    lang: str


def ticket_make(embed: EmbedToken, origin: str, lang: str) -> str:
    return signing.dumps({"e": embed.pk, "o": origin, "l": lang}, salt=TICKET_SALT, compress=True)


def ticket_read(embed: EmbedToken, value: str | None) -> Ticket | None:
    """The ticket if it is this embed's, signed, fresh, and its origin still allowed; None otherwise."""
    if not isinstance(value, str) or unstorable(value):  # a lone surrogate cannot even be encoded to check it
        return None
    try:
        data = signing.loads(value, salt=TICKET_SALT, max_age=setting("WIDGET_TICKET_SECONDS"))
    except signing.BadSignature:
        return None
    if not isinstance(data, dict) or data.get("e") != embed.pk or data.get("o") not in embed.origins():
        return None
    return Ticket(embed_id=embed.pk, origin=data["o"], lang=language(data.get("l")))


def visitor_pass(embed: EmbedToken, visitor_id: str, address: str = "") -> VisitorPass | None:
    """The visitor as the engine's admission knows them: the embed's agent and limits, a hash of the id (the id
    itself is never kept) and of the address; None when `visitor_id` is not a visitor id."""
    if not VISITOR_ID.match(visitor_id or ""):
        return None
    return VisitorPass(
        embed_id=embed.pk,
        agent_id=embed.agent_id,
        id_hash=visitor_hash(visitor_id),
        embed_key=hashlib.sha256(embed.token.encode()).hexdigest()[:32],
        address_hash=hashlib.sha256(f"{embed.token}|{address}".encode()).hexdigest()[:32],
        messages_per_hour=embed.visitor_messages_per_hour,
        daily_token_budget=embed.daily_token_budget,
        attachments_allowed=embed.files_allowed,
    )


def visitor_user(embed: EmbedToken, visitor_id: str) -> Any:
    """The visitor's account if they have one (made with their first upload or message); None otherwise. Call
    inside the embed's tenant scope."""
    if not VISITOR_ID.match(visitor_id or ""):
        return None
    found = Visitor.objects.select_related("user").filter(embed_id=embed.pk, id_hash=visitor_hash(visitor_id)).first()
    return found.user if found is not None else None


def visitor_conversation(embed: EmbedToken, visitor_id: str) -> Conversation | None:
    """The visitor's latest conversation through this embed; None before their first message (nothing is made
    before it) or if the id is not a visitor id. Call inside the embed's tenant scope."""
    if not VISITOR_ID.match(visitor_id or ""):
        return None
    return (
        Conversation.objects.select_related("agent", "version", "provider", "tenant", "context", "user", "visitor")
        .filter(
            agent=embed.agent,
            source=ConversationSource.WIDGET,
            visitor__embed_id=embed.pk,
            visitor__id_hash=visitor_hash(visitor_id),
            parent__isnull=True,
        )
        .order_by("-id")
        .first()
    )


def tokens_used_today(embed: EmbedToken) -> int:
    """Tokens (prompt + completion) of today's model calls through this embed (the admin's column)."""
    return embed_tokens_today(embed.pk)


def gone_words() -> str:
    """The words of a widget whose embed was revoked (or its agent switched off) while a page was open."""
    return _("This assistant is no longer available here.")


def tenant_visitors_delete(tenant: Any) -> None:
    """A deleted tenant's visitors go with it: their accounts (and so their conversations and memory)."""
    with tenant_scope(tenant):
        accounts = list(Visitor.objects.values_list("user_id", flat=True))
    get_user_model().objects.filter(pk__in=accounts, is_active=False).delete()
