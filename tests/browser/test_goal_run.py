"""The goal run page in Chromium: its poll shows the run's question, takes the answer and shows the result, under
the Content-Security-Policy."""

import pytest
from django.urls import reverse

from tests.agents.test_goal import GOAL, _quick, call, goal_agent, m2, provider  # noqa: F401 - fixtures


@pytest.mark.browser
def test_in_a_browser_the_page_follows_the_run_asks_and_takes_the_answer(
    asgi_live_server,
    page_for,
    tenant,
    member,
    goal_agent,  # noqa: F811 - the imported fixture
    scripted_llm,
    settings,
):
    settings.GOAL_ASK_TIMEOUT_SECONDS = 120
    scripted_llm.set_rules(
        m2({"tool_calls": [call("memory_remember", {"memory": "Asked about tea"})]}),
        # Slow: the page is drawn while the run is still running, so only its poll can show the question.
        m2({"tool_calls": [call("ask_user", {"tip": "Green or black tea?"})], "stall": 2.5}),
        m2({"tool_calls": [call("finish", {"result": "Black tea it is."})]}, last_message="Black"),
    )
    page = page_for("en-US")
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    base = asgi_live_server.url
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", member.username)
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    page.goto(f"{base}{reverse('agents:goal_start', args=[goal_agent.pk])}")
    page.fill("#id_goal", GOAL)
    page.click("#start-goal")
    page.wait_for_url(f"{base}/agents/goals/*/")
    assert page.locator("#goal-answer").is_hidden()

    page.wait_for_selector("#goal-answer:not([hidden])", timeout=15_000)  # the poll saw the question
    assert page.inner_text("#goal-question") == "Green or black tea?"
    assert "memory_remember" in page.inner_text("#goal-steps")
    page.fill("#id_answer", "Black, please")
    page.click("#goal-answer button[type=submit]")
    page.wait_for_selector("#goal-result", timeout=15_000)

    assert "Black tea it is." in page.inner_text("#goal-result")
    assert page.locator("#goal-stop").is_hidden() and page.locator("#goal-answer").is_hidden()
    assert violations == []
