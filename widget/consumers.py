"""The widget's socket `ws/embed/<token>/?ticket=...&visitor=...`: the chat socket (chat.consumers.ChatConsumer:
the same frames, catch-up and refusals) on the visitor's own conversation, entered by the embed token instead of a
session, with the visitor's message rate and the embed's daily budget checked before each message."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from django.utils.translation import override

from chat.consumers import ChatConsumer
from core.db import database_sync_to_async
from tenants.scope import tenant_scope
from widget import visitors
from widget.models import EmbedToken

# The refusal code of a message over the visitor's rate or the embed's budget (the words say which).
LIMITED = "rate_limited"


class WidgetConsumer(ChatConsumer):
    embed: EmbedToken | None = None
    ticket: visitors.Ticket | None = None

    def _resolve(self, tenant_id: int | None) -> None:
        """The tenant and conversation come from the embed token and the visitor, not from a session."""
        self.embed = visitors.token_lookup(self.scope["url_route"]["kwargs"]["token"])
        if self.embed is None:
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        self.ticket = visitors.ticket_read(self.embed, (query.get("ticket") or [""])[0])
        if self.ticket is None:
            return
        self.tenant = self.embed.tenant
        with tenant_scope(self.tenant):
            self.conversation = visitors.visitor_conversation(self.embed, (query.get("visitor") or [""])[0])

    def connect_reads(self) -> None:
        """Nothing more: _resolve read the visitor's conversation."""

    async def connect(self) -> None:
        if self.conversation is None:  # no such live token, a bad or stale ticket, not a visitor id
            await self.close(code=4403)
            return
        await self.open_stream(self.conversation, self.ticket.lang)

    def watch_access(self) -> Any:
        return lambda: None  # a visitor has no membership to lose; a revoked token refuses the next connect

    async def _user_message(self, content: dict[str, Any]) -> None:
        text = await database_sync_to_async(self._refusal)()
        if text:
            client_id = content.get("client_id")
            await self._reject(LIMITED, client_id=client_id if isinstance(client_id, str) else None, text=text)
            return
        await super()._user_message(content)

    def _refusal(self) -> str:
        with override(self.language):
            embed = visitors.token_lookup(self.embed.token)  # revoked meanwhile: refused
            if embed is None:
                return str(visitors.gone_words())
            return visitors.refusal(embed, self.conversation)
