"""What a website visitor may do through an embed token: which token a request names, whether its page's origin
is allowed, the signed ticket a framed page hands its socket, the visitor's own account and conversation, the
message rate and the daily budget (docs/embed.md).

A visitor is anonymous: the widget keeps a random id in the iframe's storage. The platform keeps only a hash of it,
as the visitor's inactive account `visitor-<embed>-<hash>` (never a member of a tenant, never able to log in), so a
conversation has its owner and long-term memory, keyed by user, is per visitor."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.core import signing
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.services import conversation_start
from core.conf import setting
from memory.models import Conversation, ConversationSource, Message, Role
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
    try:
        data = signing.loads(value or "", salt=TICKET_SALT, max_age=setting("WIDGET_TICKET_SECONDS"))
    except signing.BadSignature:
        return None
    if not isinstance(data, dict) or data.get("e") != embed.pk or data.get("o") not in embed.origins():
        return None
    return Ticket(embed_id=embed.pk, origin=data["o"], lang=language(data.get("l")))


def visitor_key(embed: EmbedToken, visitor_id: str) -> str:
    """The stored key of a visitor: the embed and a hash of the id the visitor's browser keeps."""
    return f"{embed.pk}.{hashlib.sha256(visitor_id.encode()).hexdigest()[:40]}"


def visitor_user(embed: EmbedToken, visitor_id: str) -> Any:
    """The visitor's own inactive account (created at the first visit)."""
    key = visitor_key(embed, visitor_id)
    user, created = get_user_model().objects.get_or_create(
        username=f"visitor-{key.replace('.', '-')}"[:150], defaults={"is_active": False}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def visitor_conversation(embed: EmbedToken, visitor_id: str) -> Conversation | None:
    """The visitor's latest conversation through this embed, started at the first visit; None if the id is not a
    visitor id or the agent has no published version. Call inside the embed's tenant scope."""
    if not VISITOR_ID.match(visitor_id or ""):
        return None
    key = visitor_key(embed, visitor_id)
    conversation = (
        Conversation.objects.select_related("agent", "version", "provider", "tenant", "context", "user")
        .filter(agent=embed.agent, source=ConversationSource.WIDGET, visitor=key, parent__isnull=True)
        .order_by("-id")
        .first()
    )
    if conversation is not None:
        return conversation
    if embed.agent.published_version() is None:
        return None
    user = visitor_user(embed, visitor_id)
    conversation_start(agent=embed.agent, user=user, source=ConversationSource.WIDGET, visitor=key)
    return visitor_conversation(embed, visitor_id)


def _day_start() -> dt.datetime:
    return timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)


def tokens_used_today(embed: EmbedToken) -> int:
    """Tokens (prompt + completion) of today's replies through this embed, from their recorded usage."""
    usages = Message.objects.filter(
        conversation__source=ConversationSource.WIDGET,
        conversation__visitor__startswith=f"{embed.pk}.",
        conversation__agent_id=embed.agent_id,
        role=Role.ASSISTANT,
        created_at__gte=_day_start(),
    ).values_list("usage", flat=True)
    return sum(int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0)) for u in usages if u)


def refusal(embed: EmbedToken, conversation: Conversation) -> str:
    """Why the visitor may not send a message now, in words of the active language; "" when they may."""
    if embed.visitor_messages_per_hour:
        sent = Message.objects.filter(
            conversation__visitor=conversation.visitor,
            conversation__source=ConversationSource.WIDGET,
            role=Role.USER,
            created_at__gte=timezone.now() - dt.timedelta(hours=1),
        ).count()
        if sent >= embed.visitor_messages_per_hour:
            return _("Message limit reached (%(count)s per hour). Please try again later.") % {
                "count": embed.visitor_messages_per_hour
            }
    if embed.daily_token_budget and tokens_used_today(embed) >= embed.daily_token_budget:
        return _("This assistant has answered all it can today. Please come back tomorrow.")
    return ""


def gone_words() -> str:
    """The words of a widget whose embed was revoked (or its agent switched off) while a page was open."""
    return _("This assistant is no longer available here.")


def tenant_visitors_delete(tenant: Any) -> None:
    """A deleted tenant's visitors go with it: their accounts (and so their conversations and memory)."""
    with tenant_scope(tenant):
        embed_ids = list(EmbedToken.objects.values_list("pk", flat=True))
        for embed_id in embed_ids:
            get_user_model().objects.filter(username__startswith=f"visitor-{embed_id}-", is_active=False).delete()
