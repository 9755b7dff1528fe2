"""The first-run journey (WALKTHROUGH.md): log in, see the home page in the browser's language, switch."""

import pytest
from django.core.management import call_command

from tests.browser.pages import PASSWORD, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(transactional_db):
    call_command("seed_demo", password=PASSWORD)


def test_admin_logs_in_and_sees_home_in_chinese_then_english(live_server, demo, page_for):
    page = page_for("zh-CN")
    log_in(page, live_server.url, "energy-admin")
    assert page.locator("h1").inner_text() == "能源示范"
    assert "你在这里的角色：管理员" in page.content()
    assert page.locator("[data-card=admin]").is_visible()

    with page.expect_navigation():
        page.select_option("#language-select", "en")
    assert "Your role here: Admin." in page.locator(".lead").inner_text()

    page.click("[data-card=admin] a")
    page.wait_for_url(f"{live_server.url}/admin/")
    assert "Control room" in page.content()


def test_consultant_switches_tenant_in_the_navigation_bar(live_server, demo, page_for):
    page = page_for("en-US")
    log_in(page, live_server.url, "consultant")
    first = page.locator("h1").inner_text()
    other = "餐厅示范" if first == "能源示范" else "能源示范"
    with page.expect_navigation():
        page.select_option("#tenant-select", label=other)
    assert page.locator("h1").inner_text() == other
    assert f"Now working in {other}." in page.locator(".messages").inner_text()
    # A member has no admin card.
    assert page.locator("[data-card=admin]").count() == 0


def test_wrong_password_is_explained(live_server, demo, page_for):
    page = page_for("zh-CN")
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "energy-member")
    page.fill("#id_password", "wrong")
    with page.expect_navigation():  # the form posts; is_visible() does not wait for the answer
        page.click("button[type=submit]")
    assert page.locator(".form-errors").is_visible()
    assert "用户名" in page.locator(".form-errors").inner_text()
