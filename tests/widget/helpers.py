"""An embed token on a published agent, and the calls a widget page makes (frame, chat page, socket)."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.http import HttpResponse
from django.test import Client

from agents.services import agent_create, agent_publish, conversation_start
from config.asgi import application
from engine.admission import visitor_hash
from memory.models import Conversation, ConversationSource, Visitor
from memory.services import message_add
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


def page_json(response: HttpResponse, element_id: str) -> Any:
    """The value a page hands its script in `{{ value|json_script:element_id }}`."""
    found = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', response.content.decode())
    assert found, f"no #{element_id} in the page"
    return json.loads(found.group(1))


@dataclass
class ChatPage:
    """The widget's chat page as static/widget/boot.js opens it, and what it hands chat.js."""

    response: HttpResponse
    ws_path: str
    socket_auth: dict[str, str]
    config: dict[str, Any]


def open_chat(client: Client, embed: EmbedToken, visitor: str, *, origin: str = HOST, lang: str = "en") -> ChatPage:
    """Load the frame, then post its ticket and the visitor's id to the chat page, as boot.js does."""
    ticket = ticket_for(client, embed, origin=origin, lang=lang)
    response = client.post(f"/embed/{embed.token}/chat/", {"ticket": ticket, "visitor": visitor})
    assert response.status_code == 200, response.status_code
    config = page_json(response, "chat-config")
    return ChatPage(response=response, ws_path=config["wsPath"], socket_auth=config["socketAuth"], config=config)


def communicator(path: str) -> WebsocketCommunicator:
    """The widget's socket as chat.js opens it: no credential in its URL (they go in the first frame)."""
    assert not urlsplit(path).query, path
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    return WebsocketCommunicator(application, path, headers=headers)


def visitor_conversation_start(embed: EmbedToken, visitor: str, text: str = "Where is order 42?") -> Conversation:
    """What the engine makes with a visitor's first message (engine.admission): their row, their inactive account
    and their widget conversation holding `text`, for page tests that need a visitor with a past."""
    with tenant_scope(embed.tenant):
        id_hash = visitor_hash(visitor)
        user = get_user_model().objects.create(username=f"visitor-{embed.pk}-{id_hash}", is_active=False)
        user.set_unusable_password()
        user.save(update_fields=["password"])
        row = Visitor.objects.create(tenant=embed.tenant, embed_id=embed.pk, id_hash=id_hash, user=user)
        conversation = conversation_start(agent=embed.agent, user=user, source=ConversationSource.WIDGET, visitor=row)
        message_add(conversation=conversation, role="user", content=text)
        return conversation
