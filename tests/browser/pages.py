"""What the browser tests do on the chat pages: log in, start a conversation with an agent, send a message."""

import re
import shutil

PASSWORD = "browser-pass-1"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def log_in(page, base_url: str, username: str, password: str = PASSWORD) -> None:
    """Open the home page (which sends to the login form), log in, and land on the home page."""
    page.goto(f"{base_url}/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")


def start_conversation(page, base_url: str, agent_name: str) -> None:
    """Chat > New conversation with the first agent whose name contains `agent_name`."""
    page.goto(f"{base_url}/chat/")
    value = page.locator("#id_agent option", has_text=agent_name).first.get_attribute("value")
    page.select_option("#id_agent", value=value)
    page.click("#new-conversation-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/chat/\d+/$"))


def say(page, text: str, timeout: int = 20_000) -> str:
    """Send `text` and wait for the reply to finish (its token usage shows); returns the reply's text."""
    before = page.locator(".chat-assistant .chat-usage").count()
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")
    page.wait_for_function(
        "n => document.querySelectorAll('.chat-assistant .chat-usage').length > n", arg=before, timeout=timeout
    )
    return page.locator(".chat-assistant .chat-body").last.inner_text()
