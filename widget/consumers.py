"""The widget's socket `ws/embed/<token>/`: the conversation socket (chat.consumers.ConversationSocket: the same
frames, catch-up and refusals) entered by the embed token instead of a session. Its credentials, the frame's signed
ticket and the visitor's id, come in the socket's first frame, never in its URL (docs/embed.md); the visitor and
their conversation are made by the engine's admission with their first message."""

from __future__ import annotations

from typing import Any

from django.utils.translation import override

from chat.consumers import REFUSED_CLOSE, ConversationSocket, Entry
from engine.admission import Caller, CallerKind, Target
from memory.models import ConversationSource
from tenants.scope import tenant_scope
from widget import visitors
from widget.models import EmbedToken


class EmbedEntry(Entry):
    """A website visitor on an embed token: the token names the tenant and the agent; the first frame's ticket and
    visitor id name the visitor (their latest conversation, or none yet)."""

    takes_credentials = True

    def __init__(self, scope: dict[str, Any]) -> None:
        super().__init__(scope)
        self.embed: EmbedToken | None = None
        self.visitor: visitors.VisitorPass | None = None

    def open(self) -> int | None:
        self.embed = visitors.token_lookup(self.scope["url_route"]["kwargs"]["token"])
        if self.embed is None:
            return REFUSED_CLOSE
        self.tenant = self.embed.tenant
        return None

    def credentials(self, content: dict[str, Any]) -> bool:
        ticket = visitors.ticket_read(
            self.embed, content.get("ticket") if isinstance(content.get("ticket"), str) else ""
        )
        visitor_id = content.get("visitor")
        if ticket is None or not isinstance(visitor_id, str):
            return False
        client = self.scope.get("client") or ("", 0)
        self.visitor = visitors.visitor_pass(self.embed, visitor_id, address=str(client[0]))
        if self.visitor is None:
            return False
        self.language = ticket.lang
        with tenant_scope(self.tenant):
            self.conversation = visitors.visitor_conversation(self.embed, visitor_id)
        return True

    def caller(self) -> Caller:
        return Caller(
            tenant=self.tenant, source=ConversationSource.WIDGET, kind=CallerKind.VISITOR, visitor=self.visitor
        )

    def target(self) -> Target:
        if self.conversation is not None:
            return Target(conversation=self.conversation, limit=self.limit)
        return Target(agent=self.embed.agent, latest=True)

    def gone(self) -> str:
        """The embed revoked (or its agent switched off) since the socket opened: refused, in words."""
        if visitors.token_lookup(self.embed.token) is None:
            with override(self.language):  # this runs on the database thread, outside the socket's language
                return str(visitors.gone_words())
        return ""


class WidgetConsumer(ConversationSocket):
    entry_class = EmbedEntry
