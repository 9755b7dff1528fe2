"""An embed token on a published agent, and the calls a widget page makes (frame, chat page, socket)."""

from __future__ import annotations

import re
import uuid
from urllib.parse import parse_qs, urlsplit

from channels.testing import WebsocketCommunicator
from django.test import Client

from agents.services import agent_create, agent_publish
from config.asgi import application
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from widget.models import EmbedToken

HOST = "http://shop.example"


def make_embed(tenant, base_url: str, **fields) -> EmbedToken:
    with tenant_scope(tenant):
        ModelProviderFactory(tenant=tenant, name="scripted", base_url=base_url, is_default=True)
        agent = agent_create(tenant=tenant, name="Shop helper", system_prompt="You help shoppers.", model="gpt-4")
        agent_publish(agent=agent, user=None)
        return EmbedToken.objects.create(tenant=tenant, agent=agent, name="shop", allowed_origins=HOST, **fields)


def new_visitor() -> str:
    return uuid.uuid4().hex


def ticket_for(client: Client, embed: EmbedToken, origin: str = HOST, lang: str = "en") -> str:
    """Load the framed page as the host page's frame would, and read the ticket it hands to boot.js."""
    response = client.get(f"/embed/{embed.token}/?lang={lang}", HTTP_REFERER=f"{origin}/shop/page.html")
    assert response.status_code == 200, response.status_code
    return re.search(r'"ticket": "([^"]+)"', response.content.decode()).group(1)


def socket_path(client: Client, embed: EmbedToken, visitor: str) -> str:
    """The widget socket's path as the chat page gives it to chat.js."""
    ticket = ticket_for(client, embed)
    response = client.get(f"/embed/{embed.token}/chat/", {"ticket": ticket, "visitor": visitor})
    assert response.status_code == 200
    match = re.search(r'"wsPath": "([^"]+)"', response.content.decode())
    return match.group(1).replace("\\u0026", "&")


def communicator(path: str) -> WebsocketCommunicator:
    parts = urlsplit(path)
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    query = parse_qs(parts.query)
    assert set(query) == {"ticket", "visitor"}
    return WebsocketCommunicator(application, path, headers=headers)
