"""A tenant admin edits a workflow in the browser: broken YAML is refused with the line named, a fixed one saves."""

import os

import pytest
from django.core.management import call_command

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-pass-1"


@pytest.fixture
def demo(transactional_db):
    call_command("seed_demo", password=PASSWORD, stdout=open(os.devnull, "w"))  # noqa: SIM115


def test_the_editor_shows_a_validation_error_and_saves_the_fixed_yaml(live_server, demo, page_for):
    page = page_for("en-US")
    page.goto(f"{live_server.url}/")
    page.fill("#id_username", "restaurant-admin")  # the menu template is the restaurant pack's
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    page.goto(f"{live_server.url}/agents/workflows/")
    with page.expect_navigation():
        page.click("#workflow-templates a >> nth=0")  # the menu recommendation template (the restaurant pack's)
    # The editor's script has run (it draws the line gutter after the page is parsed): the text area holds the whole
    # template, and nothing moves under the clicks below.
    page.locator(".yaml-gutter").wait_for()
    editor = page.locator("#id_yaml")
    text = editor.input_value()
    assert "菜单推荐工作流" in text
    assert "type: 'custom'" in text
    editor.fill(text.replace("type: 'custom'", "type: [custom"))
    with page.expect_navigation(timeout=30_000):  # the save is a full page load
        page.click("#save-workflow")

    errors = page.locator("#workflow-errors")
    assert errors.count() == 1, page.locator("main").inner_text()[:2000]
    assert "The YAML is malformed" in errors.inner_text() and "line 30" in errors.inner_text()
    assert "type: [custom" in page.locator("#id_yaml").input_value()  # the text is kept for fixing
    assert page.locator(".yaml-gutter .error-mark").inner_text().startswith("30")  # marked next to the line

    page.locator(".yaml-gutter").wait_for()
    page.locator("#id_yaml").fill(text)
    with page.expect_navigation(timeout=30_000):
        page.click("#save-workflow")
    page.wait_for_url(f"{live_server.url}/agents/workflows/*/")
    assert page.locator("#workflow-errors").count() == 0
    assert "菜单推荐工作流" in page.locator("h1").inner_text()
