"""Files on the chat page (issue 37): the attach button's upload into one's own conversation, the page route that
serves a file's bytes to a session user who may read it (404 for another member and another tenant, as for a
missing id), and a stored message's files shown as chips after a reload."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents.services import agent_create, agent_publish, conversation_start
from memory.attachments import Upload, attachment_upload
from memory.models import Attachment, ConversationContext
from tenants.scope import all_tenants, tenant_scope
from tests.api.attachment_files import menu_pdf, renamed_executable, small_png
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _storage(settings, tmp_path):
    settings.ATTACHMENT_STORAGE_ROOT = str(tmp_path / "attachments")


def _conversation(tenant, user):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Menu helper", system_prompt="Help.", model="gpt-4")
        agent_publish(agent=agent, user=None)
        return conversation_start(agent=agent, user=user)


def test_the_page_offers_the_attach_button_and_uploads_into_the_own_conversation(tenant, member, login):
    conversation = _conversation(tenant, member)
    client = login(member, tenant)
    page = client.get(f"/chat/{conversation.pk}/").content.decode()
    assert 'id="chat-attach"' in page and "js/attachments.js" in page and '"attachUrl": "/chat/attachments/"' in page
    response = client.post(
        "/chat/attachments/", {"conversation": conversation.pk, "file": SimpleUploadedFile("m.pdf", menu_pdf())}
    )
    assert response.status_code == 201 and response.json()["pages"] == 2
    served = client.get(f"/chat/attachments/{response.json()['id']}/")
    assert served.status_code == 200 and served["Content-Disposition"].startswith("attachment")
    assert served["X-Content-Type-Options"] == "nosniff"


def test_a_bad_file_is_refused_in_words_and_nothing_is_stored(tenant, member, login):
    conversation = _conversation(tenant, member)
    response = login(member, tenant).post(
        "/chat/attachments/",
        {"conversation": conversation.pk, "file": SimpleUploadedFile("cat.png", renamed_executable())},
    )
    assert response.status_code == 415 and response.json()["error"]["code"] == "executable"
    with all_tenants(reason="test counts"):
        assert Attachment.objects.count() == 0


def test_another_member_and_another_tenant_get_a_404(tenant, other_tenant, member, other_tenant_admin, login, client):
    conversation = _conversation(tenant, member)
    with tenant_scope(tenant):
        attachment = attachment_upload(user=member, upload=Upload("red.png", small_png()), conversation=conversation)
    colleague = UserFactory(username="colleague")
    MembershipFactory(tenant=tenant, user=colleague)
    for user, where in ((colleague, tenant), (other_tenant_admin, other_tenant)):
        client.logout()
        logged = login(user, where)
        assert logged.get(f"/chat/attachments/{attachment.pk}/").status_code == 404
        fields = {"conversation": conversation.pk, "file": SimpleUploadedFile("a.png", small_png())}
        assert logged.post("/chat/attachments/", fields).status_code == 404
    client.logout()
    assert login(member, tenant).get(f"/chat/attachments/{attachment.pk}/")["Content-Type"] == "image/png"


def test_a_stored_messages_files_show_as_chips(tenant, member, login):
    conversation = _conversation(tenant, member)
    with tenant_scope(tenant):
        from memory.services import message_add

        message = message_add(conversation=conversation, role="user", content="the menu")
        attachment = attachment_upload(user=member, upload=Upload("menu.pdf", menu_pdf()), conversation=conversation)
        Attachment.objects.filter(pk=attachment.pk).update(message=message)
        ConversationContext.objects.filter(conversation=conversation).update(attachments=1)
    page = login(member, tenant).get(f"/chat/{conversation.pk}/").content.decode()
    assert f'data-attachment-id="{attachment.pk}"' in page and f'href="/chat/attachments/{attachment.pk}/"' in page
