"""Who may open a conversation: one rule (memory.selectors.access_conversation) for the chat page and the websocket,
so the two agree for every kind of viewer, on the member's own conversation, a plan step's internal conversation
and another tenant's conversation."""

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from agents.services import agent_create, conversation_start
from config.asgi import application
from core.db import database_sync_to_async
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, UserFactory
from tests.websockets import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

OWN, INTERNAL, FOREIGN = "own", "internal", "foreign"
# viewer -> may open (own, internal, foreign)
EXPECTED = {
    "the member who owns it": (True, False, False),
    "another member": (False, False, False),
    "a tenant admin": (True, True, False),
    "the tenant owner": (True, True, False),
    "a platform superuser (no membership)": (True, True, False),
    "a platform superuser who is a member": (True, True, False),
    "a user of another tenant": (False, False, True),  # working in their tenant: only their own opens
}


def _world(tenant, other_tenant, member):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Advisor")
        own = conversation_start(agent=agent, user=member)
        internal = conversation_start(agent=agent, user=member, parent=own)
    with tenant_scope(other_tenant):
        stranger = UserFactory()
        MembershipFactory(user=stranger, tenant=other_tenant, role=Role.OWNER)
        foreign = conversation_start(agent=agent_create(tenant=other_tenant, name="Advisor"), user=stranger)
    return {OWN: own, INTERNAL: internal, FOREIGN: foreign}, stranger


def _viewer(kind, tenant, member, stranger):
    if kind == "the member who owns it":
        return member
    if kind == "a user of another tenant":
        return stranger
    if kind == "a platform superuser (no membership)":
        return UserFactory(is_superuser=True, is_staff=True)
    user = UserFactory(is_superuser=kind == "a platform superuser who is a member")
    role = {"a tenant admin": Role.ADMIN, "the tenant owner": Role.OWNER}.get(kind, Role.MEMBER)
    MembershipFactory(user=user, tenant=tenant, role=role)
    return user


async def _socket_opens(user, tenant, conversation_id) -> bool:
    cookie = await database_sync_to_async(session_cookie)(user, tenant)
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver"), (b"cookie", cookie)]
    communicator = WebsocketCommunicator(application, f"/ws/chat/{conversation_id}/", headers=headers)
    connected, code = await communicator.connect()
    if connected:
        await communicator.disconnect()
    else:
        assert code == 4403
    return connected


@pytest.mark.parametrize("kind", list(EXPECTED))
async def test_the_page_and_the_websocket_agree(kind, tenant, other_tenant, member):
    conversations, stranger = await database_sync_to_async(_world)(tenant, other_tenant, member)
    viewer = await database_sync_to_async(_viewer)(kind, tenant, member, stranger)
    # Everyone works in the tenant of the conversations (the other tenant's user: in their own).
    working_in = other_tenant if viewer == stranger else tenant

    def page_opens(conversation) -> bool:
        client = Client()
        client.force_login(viewer)
        session = client.session
        session["active_tenant_id"] = working_in.pk
        session.save()
        status = client.get(f"/chat/{conversation.pk}/").status_code
        assert status in (200, 404)
        return status == 200

    seen = []
    for name in (OWN, INTERNAL, FOREIGN):
        conversation = conversations[name]
        page = await database_sync_to_async(page_opens)(conversation)
        socket = await _socket_opens(viewer, working_in, conversation.pk)
        assert page == socket, f"{kind} / {name}: page {page}, websocket {socket}"
        seen.append(page)
    assert tuple(seen) == EXPECTED[kind]
