"""An admin adds knowledge (WALKTHROUGH.md): Knowledge > New knowledge base > upload several files; each shows its
status (a bad one says why); the table follows a document's progress live; a search shows ranked chunks with
their source and score."""

import json
import os
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from knowledge.ingest import document_ingest
from knowledge.models import KnowledgeBase
from knowledge.services import document_add
from tenants.models import Tenant
from tenants.scope import tenant_scope
from tests.browser.pages import PASSWORD, log_in
from tests.knowledge.factories import MENU, make_pdf


def _screenshot(page, name: str) -> None:
    if os.environ.get("SCREENSHOTS") == "1":
        screens = Path(settings.BASE_DIR) / "bench" / "screens"
        screens.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screens / name), full_page=True)


pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(transactional_db, settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    call_command("seed_demo", password=PASSWORD, stdout=open(os.devnull, "w"))  # noqa: SIM115


def test_admin_creates_a_knowledge_base_uploads_files_and_searches(live_server, demo, page_for, tmp_path):
    page = page_for("en-US")
    log_in(page, live_server.url, "energy-admin")
    page.click("[data-card=knowledge] a")
    page.wait_for_url(f"{live_server.url}/knowledge/")
    assert "pv_basics" in page.locator("#knowledge-bases").inner_text()  # the demo knowledge base

    page.click("#new-knowledge-base")
    assert "understands English only" in page.locator("#embedder-settings").inner_text()
    assert page.locator("input[name=embedder][value=local_multilingual]").is_checked()
    assert "Reads Chinese, English" in page.locator("#embedder-settings").inner_text()
    page.fill("#id_name", "Dishes")
    page.fill("#id_chunk_size", "120")
    page.fill("#id_chunk_overlap", "20")
    with page.expect_navigation():
        page.click("#save-knowledge-base")
    assert page.locator("h1").inner_text() == "Dishes"

    menu = tmp_path / "menu.json"
    menu.write_text(json.dumps(MENU, ensure_ascii=False), encoding="utf-8")
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nThe kitchen opens at ten. Mushrooms arrive on Mondays.\n", encoding="utf-8")
    broken = tmp_path / "scan.pdf"
    broken.write_bytes(b"this was never a PDF")
    page.set_input_files("#id_files", [str(menu), str(notes), str(broken)])
    with page.expect_navigation():
        page.click("#upload-button")
    assert "Uploaded 3 files" in page.locator(".messages").inner_text()

    rows = page.locator("#document-table tr[data-document]")
    assert rows.count() == 3
    for name in ("menu.json", "notes.md"):
        row = page.locator("#document-table tr[data-document]", has_text=name)
        assert row.get_attribute("data-status") == "ready"
        assert row.locator("[data-role=status]").inner_text() == "Ready"
    failed = page.locator("#document-table tr[data-document]", has_text="scan.pdf")
    assert failed.get_attribute("data-status") == "failed"
    assert "not a PDF" in failed.locator("[data-role=error]").inner_text()
    _screenshot(page, "knowledge-documents.png")

    page.click("#search-link")
    page.fill("#id_q", "香菇")
    page.select_option("#id_mode", "hybrid")
    with page.expect_navigation():
        page.click("#search-button")
    first = page.locator("#search-results .hit").first
    assert "香菇黄焖鸡" in first.locator(".hit-text").inner_text()
    assert first.locator(".hit-source").inner_text() == "menu.json"
    assert first.locator(".hit-rank").inner_text() == "#1"
    assert re.search(r"score \d+\.\d+", first.locator(".hit-scores").inner_text())
    _screenshot(page, "knowledge-search.png")


def test_the_documents_table_follows_progress_live(live_server, demo, page_for):
    tenant = Tenant.objects.get(slug="energy")
    with tenant_scope(tenant):
        kb = KnowledgeBase.objects.get(name="pv_basics")
        pending = document_add(
            knowledge_base=kb, name="inverters.pdf", content=make_pdf(["Inverters turn DC into AC."]), queue=False
        )
    page = page_for("en-US")
    log_in(page, live_server.url, "energy-member")
    page.goto(f"{live_server.url}/knowledge/{kb.pk}/")
    row = page.locator(f"tr[data-document='{pending.pk}']")
    assert row.get_attribute("data-status") == "pending"
    assert row.locator("[data-role=progress]").inner_text() == "0%"

    assert document_ingest(document_id=pending.pk) == "ready"  # what a worker would do, while the page polls

    page.wait_for_selector(f"tr[data-document='{pending.pk}'][data-status='ready']", timeout=10_000)
    assert row.locator("[data-role=status]").inner_text() == "Ready"
    assert not row.locator("[data-role=progress-wrap]").is_visible()
    assert int(row.locator("[data-role=chunks]").inner_text()) >= 1
