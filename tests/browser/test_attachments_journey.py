"""Files in a conversation in Chromium (issue 37, docs/attachments.md), in Chinese: a member attaches a PDF through
the attach button's file chooser and pastes a photographed menu (bench/data/ocr/zh_menu.png, read by the real OCR);
each shows in the tray (the image as a thumbnail), its upload and reading end; the question goes with both files
and the reply answers from both. A renamed program is refused next to its name, in Chinese, and nothing is stored
or sent. After a reload the stored message still shows its files, and the image's chip opens the file itself.

The model is the scripted one (llm/fake_server.py): the offline demo model answers from one file per reply (an
image's OCR text, or a document's first passage), and this journey asks of both at once."""

from __future__ import annotations

import base64
import re

import pytest

from memory.models import Attachment, Message
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.api.attachment_files import OCR_IMAGES, renamed_executable
from tests.browser.pages import PASSWORD, log_in, start_conversation
from tests.factories import MembershipFactory, UserFactory
from tests.knowledge.factories import make_pdf
from tests.widget.helpers import make_embed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPORT_TITLE = "Lotus Garden spring report"
REPORT_FIRST = "Sales rose 12 percent in April"
QUESTION = "宫保鸡丁多少钱？这份报告讲了什么？"
# The scripted model answers only when the message carries both files: the document's heading and first line, and
# the OCR line of the image that names the dish asked about.
BOTH_FILES = (
    r"^(?=.*?\[文档/Document (?P<doc>[^\n\]]+?)(?:, \d+ pages)?\]\n\s*(?P<first>[^\n]+))"
    r"(?=.*?\[图片/Image (?P<image>[^\n\]]+?), text read by OCR\].*?\n(?P<line>[^\n]*宫保鸡丁[^\n]*))"
)
REPLY = "文件“{doc}”开头写道：{first}。图片“{image}”上写着：{line}"

# The tray's states as they change (upload, reading, ready or failed), per file name.
RECORDER = """() => {
  window.__states = {};
  new MutationObserver(() => {
    document.querySelectorAll('#chat-tray .chat-tray-item').forEach((item) => {
      const name = item.querySelector('.chat-file-name').textContent;
      const seen = (window.__states[name] = window.__states[name] || []);
      const state = item.dataset.state || '';
      if (seen[seen.length - 1] !== state) seen.push(state);
    });
  }).observe(document.getElementById('chat-tray'), {subtree: true, childList: true, attributes: true});
}"""

# A real paste: the image goes on the system clipboard, then Ctrl+V in the message box.
CLIPBOARD_WRITE = """async (data) => {
  const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
  await navigator.clipboard.write([new ClipboardItem({'image/png': new Blob([bytes], {type: 'image/png'})})]);
}"""


@pytest.fixture
def chat(tenant, scripted_llm, settings, tmp_path):
    """A member of the tenant and an agent on the scripted model (not a vision model: images reach it as OCR text)."""
    settings.ATTACHMENT_STORAGE_ROOT = str(tmp_path / "attachments")
    scripted_llm.set_rules(
        {"when": {"last_message": {"regex": BOTH_FILES}}, "reply": {"text": REPLY}},
        {"when": {}, "reply": {"text": "没有收到两个文件。"}},
    )
    agent = make_embed(tenant, scripted_llm.base_url).agent
    user = UserFactory(username="files-member")
    user.set_password(PASSWORD)
    user.save()
    MembershipFactory(tenant=tenant, user=user, role=Role.MEMBER)
    return agent


def _stored(tenant) -> tuple[int, int]:
    with tenant_scope(tenant):
        return Attachment.objects.count(), Message.objects.count()


def _ready(page, name: str) -> None:
    item = page.locator("#chat-tray .chat-tray-item", has_text=name)
    item.and_(page.locator("[data-state=ready]")).wait_for(timeout=90_000)  # the OCR's first run loads its models


def test_a_member_sends_a_pdf_and_a_pasted_image_and_the_reply_answers_from_both(
    asgi_live_server, tenant, chat, page_for, scripted_llm
):
    base = asgi_live_server.url
    page = page_for("zh-CN")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    log_in(page, base, "files-member")
    start_conversation(page, base, chat.name)
    page.evaluate(RECORDER)

    # The PDF through the attach button's file chooser.
    report = make_pdf([f"{REPORT_TITLE}\n{REPORT_FIRST}\nRent stayed the same", "Outlook\nA second shop in June"])
    with page.expect_file_chooser() as chooser:
        page.click("#chat-attach")
    chooser.value.set_files([{"name": "report.pdf", "mimeType": "application/pdf", "buffer": report}])
    # The menu photo pasted into the message box (Chromium names a pasted image image.png).
    menu = (OCR_IMAGES / "zh_menu.png").read_bytes()
    page.evaluate(CLIPBOARD_WRITE, base64.b64encode(menu).decode())
    page.focus("#chat-input")
    page.keyboard.press("Control+V")
    assert page.input_value("#chat-input") == ""  # the image was attached, not pasted as text

    pasted = page.locator("#chat-tray .chat-tray-item").nth(1)
    pasted.wait_for()
    assert page.locator("#chat-tray .chat-tray-item").count() == 2
    assert (pasted.locator("img.chat-file-thumb").get_attribute("src") or "").startswith("data:image/png")
    image_name = pasted.locator(".chat-file-name").inner_text()
    assert page.locator("#chat-send").is_disabled()  # still uploading or reading
    _ready(page, "report.pdf")
    _ready(page, image_name)
    states = page.evaluate("() => window.__states")
    assert states[image_name][-2:] == ["reading", "ready"], states  # the server read it (OCR), then it was ready
    assert states["report.pdf"][-1] == "ready" and "uploading" in states["report.pdf"], states
    assert "正在读取" not in page.locator("#chat-tray").inner_text()
    assert "2 页" in page.locator("#chat-tray .chat-tray-item", has_text="report.pdf").inner_text()

    page.fill("#chat-input", QUESTION)
    page.press("#chat-input", "Enter")
    sent = page.locator(".chat-user").last
    assert sent.locator(".chat-file").count() == 2
    page.wait_for_selector(".chat-assistant .chat-usage", timeout=30_000)
    reply = page.locator(".chat-assistant .chat-body").last.inner_text()
    assert f"文件“report.pdf”开头写道：{REPORT_TITLE}" in reply, reply
    assert re.search(rf"图片“{re.escape(image_name)}”上写着：宫保鸡丁\s*[¥￥]?\s*38", reply), reply
    assert page.locator("#chat-tray").is_hidden()
    with tenant_scope(tenant):
        files = list(Attachment.objects.order_by("pk").values_list("name", "message__content"))
    assert files == [("report.pdf", QUESTION), (image_name, QUESTION)]
    with tenant_scope(tenant):
        image_id = Attachment.objects.get(name=image_name).pk
    # The sent message's image chip opens the file already, as the stored one does after a reload.
    assert sent.locator("a.chat-file-image").get_attribute("href") == f"/chat/attachments/{image_id}/"

    # A program renamed .pdf: refused next to its name, in Chinese; nothing stored, nothing sent.
    before = _stored(tenant)
    requests = len(scripted_llm.requests())
    with page.expect_file_chooser() as chooser:
        page.click("#chat-attach")
    chooser.value.set_files([{"name": "invoice.pdf", "mimeType": "application/pdf", "buffer": renamed_executable()}])
    refused = page.locator("#chat-tray .chat-tray-item[data-state=failed]", has_text="invoice.pdf")
    refused.wait_for()
    assert refused.get_attribute("role") == "alert"
    words = refused.locator(".chat-file-status").inner_text()
    assert "invoice.pdf 未能附加" in words and "是一个程序" in words, words
    assert page.locator("#chat-send").is_disabled()
    page.press("#chat-input", "Enter")
    assert page.locator(".chat-user").count() == 1
    assert _stored(tenant) == before and len(scripted_llm.requests()) == requests

    # Back later: the stored message shows its files; the image's chip opens the image.
    page.reload()
    chips = page.locator(".chat-user .chat-file")
    assert [chips.nth(i).locator(".chat-file-name").inner_text() for i in range(2)] == ["report.pdf", image_name]
    thumb = page.locator(".chat-user .chat-file-image img.chat-file-thumb")
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=thumb.element_handle())
    with page.context.expect_page() as opened:
        page.locator(".chat-user .chat-file-image").click()
    image_page = opened.value
    image_page.wait_for_load_state()
    assert image_page.url == f"{base}/chat/attachments/{image_id}/"
    shown = image_page.request.get(image_page.url)
    assert shown.status == 200 and shown.headers["content-type"] == "image/png"
    assert image_page.evaluate("() => document.images.length && document.images[0].naturalWidth") > 0
