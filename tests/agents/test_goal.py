"""Seed 3's long-lived goal agent: the loop against the scripted model (R, U, S, M1, the question with its timeout,
finish), its limits and Stop, the Celery task's share of iterations, the pages and who may see a run, and a goal
agent in the chat. Transactional: the run's background threads (the eager line, the question's timer) see the rows."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse
from django.utils import timezone

from agents.goal import dispatch
from agents.goal.loop import CONTINUE, SEED_PROMPT, advance_run, history_window
from agents.goal.models import GoalLimit, GoalRun, GoalRunStatus, GoalStep, GoalStepKind
from agents.goal.services import NO_REPLY, goal_run_start, goal_run_stop
from agents.goal.tasks import run_goal
from agents.services import agent_create, agent_publish, conversation_start
from llm.messages import ChatMessage
from memory.longterm.strength import Owner, remember
from memory.models import Dream, MemoryItem
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, UserFactory
from tests.llm.factories import ModelProviderFactory
from tests.turns import user_turn

pytestmark = pytest.mark.django_db(transaction=True)

M2 = "m2-plan"
M1 = "m1-exec"
GOAL = "Find out which tea the user likes and write it down."
TOOLS = {"memory_recall", "memory_remember", "sleep", "execute_task", "ask_user", "finish"}


@pytest.fixture(autouse=True)
def _quick(settings):
    settings.LLM_RETRY_BASE_DELAY = 0.01
    settings.LLM_RETRY_MAX_DELAY = 0.02
    yield
    dispatch.goal_line.wait(timeout=20)  # nothing of this test runs on after it


def call(name, arguments=None):
    return {"name": name, "arguments": arguments or {}}


def m2(reply, *, times=1, **when):
    return {"when": {"model": M2, **when}, "reply": reply, **({"times": times} if times else {})}


@pytest.fixture
def provider(tenant, scripted_llm):
    with tenant_scope(tenant):
        return ModelProviderFactory(
            tenant=tenant, name="scripted", base_url=scripted_llm.base_url, is_default=True, max_retries=0,
            planning_model=M2, execution_model=M1,
        )  # fmt: skip


@pytest.fixture
def goal_agent(tenant, provider):
    with tenant_scope(tenant):
        return agent_create(tenant=tenant, name="Tea scout", kind="goal", model="", system_prompt="",
                            token_overflow_config={"strategy": "none"})  # fmt: skip


@pytest.fixture
def start(tenant, goal_agent, member):
    def _start(user=None, goal=GOAL, queue=False, **limits):
        with tenant_scope(tenant):
            return goal_run_start(agent=goal_agent, user=user or member, goal=goal, queue=queue, **limits)

    return _start


def advance(tenant, run, iterations=20, clock=None):
    with tenant_scope(tenant):
        kwargs = {"clock": clock} if clock else {}
        return async_to_sync(advance_run)(run_id=run.pk, iterations=iterations, **kwargs)


def fresh(tenant, run):
    with tenant_scope(tenant):
        return GoalRun.objects.get(pk=run.pk)


def steps(tenant, run):
    with tenant_scope(tenant):
        return [(s.iteration, s.kind, s.name) for s in GoalStep.objects.filter(run=run).order_by("id")]


def step_rows(tenant, run, **filters):
    with tenant_scope(tenant):
        return list(GoalStep.objects.filter(run=run, **filters).order_by("id"))


def model_requests(scripted_llm, model=M2):
    return [r["body"] for r in scripted_llm.requests() if r["body"].get("model") == model]


def eventually(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# --- the loop -------------------------------------------------------------------------------------------------------


def test_the_loop_runs_sleep_m1_remember_recall_and_finish_and_records_every_step(
    tenant, member, goal_agent, start, scripted_llm
):
    key = f"{goal_agent.pk}_{member.pk}"
    with tenant_scope(tenant):  # a memory weak and old enough for sleep to forget it
        remember(Owner(user_id=member.pk, key=key), "a green teapot by the window",
                 now=timezone.now() - dt.timedelta(days=2))  # fmt: skip
    scripted_llm.set_rules(
        {"when": {"model": M1, "system_prompt": "梦境"}, "reply": {"text": "I dreamt of a green teapot."}},
        {"when": {"model": M1, "system_prompt": "分解任务"}, "reply": {"text": "Oolong is a partly oxidised tea."}},
        m2({"tool_calls": [call("sleep"), call("execute_task", {"task": "Explain oolong", "context": "tea"})]}),
        m2(
            {
                "tool_calls": [
                    call("memory_remember", {"memory": "The user likes oolong tea"}),
                    call("memory_recall", {"query": "which tea does the user like"}),
                ]
            }
        ),
        m2({"tool_calls": [call("finish", {"result": "The user likes oolong."})]}),
    )
    run = start()

    assert advance(tenant, run) is False

    run = fresh(tenant, run)
    assert (run.status, run.result) == (GoalRunStatus.FINISHED, "The user likes oolong.")
    assert steps(tenant, run) == [
        (1, "model", M2), (1, "dream", "sleep"), (1, "tool", "execute_task"),
        (2, "model", M2), (2, "tool", "memory_remember"), (2, "tool", "memory_recall"),
        (3, "model", M2), (3, "tool", "finish"),
    ]  # fmt: skip
    assert (run.iterations, run.tool_calls, run.dreams) == (3, 5, 1)
    (dream,) = step_rows(tenant, run, kind=GoalStepKind.DREAM)
    assert dream.summary == "I dreamt of a green teapot." and dream.tokens > 0
    (task,) = step_rows(tenant, run, name="execute_task")
    assert task.summary == "Oolong is a partly oxidised tea." and task.arguments["task"] == "Explain oolong"
    (recalled,) = step_rows(tenant, run, name="memory_recall")
    assert "The user likes oolong tea" in recalled.summary
    with tenant_scope(tenant):
        assert list(MemoryItem.objects.filter(key=key).values_list("text", flat=True)) == ["The user likes oolong tea"]
        assert Dream.objects.get(key=key, user=member).text == "I dreamt of a green teapot."
        assert run.tokens == sum(s.tokens for s in GoalStep.objects.filter(run=run)) > 0

    first, second, third = model_requests(scripted_llm)
    assert {tool["function"]["name"] for tool in first["tools"]} == TOOLS
    system = first["messages"][0]["content"]
    assert first["messages"][0]["role"] == "system" and SEED_PROMPT in system and GOAL in system
    results = {m["content"] for m in second["messages"] if m["role"] == "tool"}
    assert {"I dreamt of a green teapot.", "Oolong is a partly oxidised tea."} <= results
    assert third["messages"][-1]["role"] == "tool" and "oolong" in third["messages"][-1]["content"]
    (m1_request,) = [r for r in model_requests(scripted_llm, M1) if "分解任务" in r["messages"][0]["content"]]
    assert "Explain oolong" in m1_request["messages"][1]["content"] and "tea" in m1_request["messages"][1]["content"]


def test_a_reply_without_tool_calls_is_followed_by_continue(tenant, start, scripted_llm):
    scripted_llm.set_rules(
        m2({"text": "Let me think about tea."}),
        m2({"tool_calls": [call("finish", {"result": "done"})]}),
    )
    run = start()
    advance(tenant, run)
    assert fresh(tenant, run).status == GoalRunStatus.FINISHED
    _first, second = model_requests(scripted_llm)
    assert second["messages"][-2] == {"role": "assistant", "content": "Let me think about tea."}
    assert second["messages"][-1] == {"role": "user", "content": CONTINUE}


def test_a_failing_tool_call_is_recorded_and_its_error_goes_back_to_the_model(tenant, start, scripted_llm):
    scripted_llm.set_rules(
        m2({"tool_calls": [call("execute_task", {"context": "no task"}), call("delete_everything")]}),
        m2({"tool_calls": [call("finish", {"result": "gave up"})]}),
    )
    run = start()
    advance(tenant, run)
    failed = step_rows(tenant, run, iteration=1, kind=GoalStepKind.TOOL)
    assert [(s.name, s.ok) for s in failed] == [("execute_task", False), ("delete_everything", False)]
    errors = [m["content"] for m in model_requests(scripted_llm)[1]["messages"] if m["role"] == "tool"]
    assert "'task' is a required property" in errors[0] and "not available" in errors[1]


# --- ask_user(tip, timeout) -----------------------------------------------------------------------------------------


def test_an_unanswered_question_returns_not_replied_after_its_timeout_and_the_loop_goes_on(
    tenant, start, scripted_llm, settings
):
    settings.GOAL_ASK_TIMEOUT_SECONDS = 0.3  # the model asks to wait a minute: the operator's bound wins
    scripted_llm.set_rules(
        m2({"tool_calls": [call("ask_user", {"tip": "Green or black tea?", "timeout": 60})]}),
        m2({"tool_calls": [call("finish", {"result": "went on alone"})]}, last_message="用户暂未回复"),
    )
    run = start()

    assert advance(tenant, run) is False
    waiting = fresh(tenant, run)
    assert (waiting.status, waiting.question) == (GoalRunStatus.WAITING_FOR_USER, "Green or black tea?")
    assert (waiting.ask_deadline - waiting.asked_at).total_seconds() == pytest.approx(0.3)
    assert len(model_requests(scripted_llm)) == 1  # nothing runs while it waits

    assert eventually(lambda: fresh(tenant, run).status == GoalRunStatus.FINISHED)
    run = fresh(tenant, run)
    assert run.result == "went on alone"
    (answer,) = step_rows(tenant, run, kind=GoalStepKind.ANSWER)
    assert (answer.name, answer.summary, answer.iteration) == ("timeout", NO_REPLY, 1)
    second = model_requests(scripted_llm)[1]
    ask_id = second["messages"][-2]["tool_calls"][0]["id"]
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": ask_id, "content": NO_REPLY}


def test_one_question_at_a_time_and_it_comes_after_the_other_calls(tenant, start, scripted_llm, settings):
    settings.GOAL_ASK_TIMEOUT_SECONDS = 60
    asks = [call("ask_user", {"tip": "Green or black tea?"}), call("delete_everything"), call("ask_user", {"tip": "?"})]
    scripted_llm.set_rules(m2({"tool_calls": asks}))
    run = start()
    assert advance(tenant, run) is False
    waiting = fresh(tenant, run)
    assert (waiting.status, waiting.question) == (GoalRunStatus.WAITING_FOR_USER, "Green or black tea?")
    assistant, *results = waiting.messages[-3:]
    ids = [part["id"] for part in assistant["tool_calls"]]
    assert len(ids) == 3 and all(ids) and waiting.ask_call_id == ids[0]
    assert [m["tool_call_id"] for m in results] == ids[1:]  # the question's result stays open
    assert "not available" in results[0]["content"]
    assert results[1]["content"] == "Error: one question at a time: ask again once this one is answered."
    assert [s.kind for s in step_rows(tenant, run, iteration=1)][1:] == [GoalStepKind.TOOL, GoalStepKind.ASK]
    with tenant_scope(tenant):
        goal_run_stop(run=fresh(tenant, run))


def test_a_question_after_finish_is_answered_finished(tenant, start, scripted_llm):
    scripted_llm.set_rules(m2({"tool_calls": [call("ask_user", {"tip": "Tea?"}), call("finish", {"result": "ok"})]}))
    run = start()
    advance(tenant, run)
    run = fresh(tenant, run)
    assert (run.status, run.result) == (GoalRunStatus.FINISHED, "ok")
    ask_id = run.messages[-3]["tool_calls"][0]["id"]
    assert run.messages[-1] == {"role": "tool", "tool_call_id": ask_id, "content": "Error: finished."}


def test_the_users_answer_on_the_page_resumes_the_loop(tenant, member, start, login, scripted_llm, settings):
    settings.GOAL_ASK_TIMEOUT_SECONDS = 60
    scripted_llm.set_rules(
        m2({"tool_calls": [call("ask_user", {"tip": "Green or black tea?"})]}),
        m2({"tool_calls": [call("finish", {"result": "black it is"})]}, last_message="Black, please"),
    )
    run = start()
    advance(tenant, run)
    client = login(member, tenant)
    page = client.get(reverse("agents:goal_run", args=[run.pk])).content.decode()
    assert 'id="goal-answer"' in page and "Green or black tea?" in page

    response = client.post(reverse("agents:goal_run_answer", args=[run.pk]), {"answer": "Black, please"})

    assert response.status_code == 302
    assert run.pk not in dispatch.ask_timer  # the timeout will not answer as well
    assert eventually(lambda: fresh(tenant, run).status == GoalRunStatus.FINISHED)
    (answer,) = step_rows(tenant, run, kind=GoalStepKind.ANSWER)
    assert (answer.name, answer.summary) == ("user", "Black, please")
    assert model_requests(scripted_llm)[1]["messages"][-1]["content"] == "Black, please"
    # Too late: the run no longer waits, nothing changes.
    client.post(reverse("agents:goal_run_answer", args=[run.pk]), {"answer": "Green!"})
    assert len(step_rows(tenant, run, kind=GoalStepKind.ANSWER)) == 1


def test_only_the_runs_user_answers_its_question(tenant, tenant_admin, start, login, scripted_llm, settings):
    settings.GOAL_ASK_TIMEOUT_SECONDS = 60
    scripted_llm.set_rules(m2({"tool_calls": [call("ask_user", {"tip": "Which tea?"})]}))
    run = start()
    advance(tenant, run)
    client = login(tenant_admin, tenant)
    assert client.get(reverse("agents:goal_run", args=[run.pk])).status_code == 200  # admins watch
    assert client.post(reverse("agents:goal_run_answer", args=[run.pk]), {"answer": "mine"}).status_code == 404
    assert fresh(tenant, run).status == GoalRunStatus.WAITING_FOR_USER
    with tenant_scope(tenant):
        goal_run_stop(run=run)  # a waiting run stops at once (and its timer goes)
    assert fresh(tenant, run).status == GoalRunStatus.STOPPED and run.pk not in dispatch.ask_timer


# --- limits and Stop ------------------------------------------------------------------------------------------------


def test_the_iterations_limit_ends_the_run(tenant, start, scripted_llm):
    scripted_llm.set_rules(m2({"text": "Still thinking."}, times=None))
    run = start(max_iterations=3)
    advance(tenant, run)
    run = fresh(tenant, run)
    assert (run.status, run.limit_reached, run.iterations) == (GoalRunStatus.LIMIT_REACHED, GoalLimit.ITERATIONS, 3)
    assert len(model_requests(scripted_llm)) == 3 and run.ended_at is not None


def test_the_tokens_per_hour_limit_ends_the_run(tenant, start, scripted_llm):
    scripted_llm.set_rules(m2({"text": "Still thinking."}, times=None))
    run = start(max_tokens_per_hour=1)
    advance(tenant, run)
    run = fresh(tenant, run)
    assert (run.status, run.limit_reached, run.iterations) == (GoalRunStatus.LIMIT_REACHED, "tokens_per_hour", 1)
    assert len(model_requests(scripted_llm)) == 1


def test_tokens_older_than_an_hour_do_not_count(tenant, start, scripted_llm, settings):
    settings.GOAL_MAX_WALL_SECONDS = 10**7
    scripted_llm.set_rules(m2({"text": "Still thinking."}, times=None))
    run = start(max_tokens_per_hour=1, max_iterations=3, max_wall_seconds=10**7)
    now = [timezone.now()]

    def clock():  # every reading is two hours after the last
        now[0] += dt.timedelta(hours=2)
        return now[0]

    advance(tenant, run, clock=clock)
    run = fresh(tenant, run)
    assert (run.status, run.limit_reached, run.iterations) == (GoalRunStatus.LIMIT_REACHED, "iterations", 3)


def test_the_wall_time_limit_ends_the_run(tenant, start, scripted_llm):
    scripted_llm.set_rules(m2({"text": "Still thinking."}, times=None))
    run = start(max_wall_seconds=60)
    now = [run.started_at]

    def clock():
        now[0] += dt.timedelta(seconds=10)
        return now[0]

    advance(tenant, run, clock=clock)
    run = fresh(tenant, run)
    assert (run.status, run.limit_reached) == (GoalRunStatus.LIMIT_REACHED, GoalLimit.WALL_TIME)
    assert 1 <= run.iterations < run.max_iterations
    assert (run.ended_at - run.started_at).total_seconds() >= 60


def test_limits_are_bounded_by_the_settings(tenant, start, settings):
    settings.GOAL_MAX_ITERATIONS = 10
    run = start()
    assert (run.max_iterations, run.max_tokens_per_hour) == (10, settings.GOAL_MAX_TOKENS_PER_HOUR)
    with pytest.raises(Exception) as error:
        start(max_iterations=11)
    assert "max_iterations" in error.value.message_dict


def test_stop_is_seen_between_iterations(tenant, start, scripted_llm):
    scripted_llm.set_rules(m2({"text": "Still thinking."}, times=None))
    run = start()
    assert advance(tenant, run, iterations=1) is True
    with tenant_scope(tenant):
        stopping = goal_run_stop(run=run)
    assert (stopping.status, stopping.stop_requested) == (GoalRunStatus.RUNNING, True)

    assert advance(tenant, run) is False

    run = fresh(tenant, run)
    assert (run.status, run.iterations) == (GoalRunStatus.STOPPED, 1)
    assert len(model_requests(scripted_llm)) == 1


def test_stop_pressed_again_ends_a_run_whose_loop_is_gone(tenant, start):
    run = start()  # nothing runs it (a restarted process lost its thread)
    with tenant_scope(tenant):
        goal_run_stop(run=run)
        assert fresh(tenant, run).status == GoalRunStatus.RUNNING
        goal_run_stop(run=run)
    assert fresh(tenant, run).status == GoalRunStatus.STOPPED


def test_a_model_error_fails_the_run_with_its_message(tenant, start, scripted_llm):
    scripted_llm.set_rules(m2({"error": {"status": 401}}))
    run = start()
    advance(tenant, run)
    run = fresh(tenant, run)
    assert run.status == GoalRunStatus.FAILED and "API key" in run.error
    assert [(s.kind, s.ok) for s in step_rows(tenant, run)] == [("model", False)]


# --- Celery -----------------------------------------------------------------------------------------------------------


def test_a_task_runs_a_bounded_share_of_iterations_and_queues_the_next(tenant, start, scripted_llm, settings):
    settings.GOAL_ITERATIONS_PER_TASK = 2
    scripted_llm.set_rules(m2({"text": "Still thinking."}, times=None))
    run = start(max_iterations=5)

    assert advance(tenant, run, iterations=2) is True
    assert fresh(tenant, run).iterations == 2

    assert run_goal(tenant.pk, run.pk) is True  # two more here, then the next task is queued (eager: a thread)
    assert dispatch.goal_line.wait(timeout=20)
    run = fresh(tenant, run)
    assert (run.status, run.limit_reached, run.iterations) == (GoalRunStatus.LIMIT_REACHED, "iterations", 5)


# --- pages ----------------------------------------------------------------------------------------------------------


def test_the_start_page_prefills_the_limits_and_starts_a_run_without_waiting_for_it(
    tenant, member, goal_agent, login, scripted_llm, settings
):
    settings.GOAL_MAX_ITERATIONS = 7
    scripted_llm.set_rules(m2({"tool_calls": [call("finish", {"result": "done"})], "stall": 1.0}))
    client = login(member, tenant)
    url = reverse("agents:goal_start", args=[goal_agent.pk])
    page = client.get(url).content.decode()
    assert 'name="max_iterations"' in page and 'value="7"' in page and 'max="7"' in page

    too_many = client.post(url, {"goal": GOAL, "max_iterations": 8, "max_tokens_per_hour": 100, "max_wall_seconds": 60})
    assert too_many.status_code == 200 and "errors-max_iterations" in too_many.content.decode()

    began = time.monotonic()
    response = client.post(url, {"goal": GOAL, "max_iterations": 4, "max_tokens_per_hour": 5000,
                                 "max_wall_seconds": 600})  # fmt: skip
    assert time.monotonic() - began < 0.9  # the model stalls a second: the loop runs in the background
    with tenant_scope(tenant):
        run = GoalRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("agents:goal_run", args=[run.pk])
    assert (run.max_iterations, run.max_tokens_per_hour, run.max_wall_seconds, run.user) == (4, 5000, 600, member)
    assert eventually(lambda: fresh(tenant, run).status == GoalRunStatus.FINISHED)


def test_the_run_page_shows_iterations_tool_calls_and_dreams(tenant, member, start, login, scripted_llm):
    scripted_llm.set_rules(
        m2({"tool_calls": [call("memory_remember", {"memory": "Likes jasmine tea"})]}),
        m2({"tool_calls": [call("finish", {"result": "Jasmine."})]}),
    )
    run = start()
    advance(tenant, run)
    with tenant_scope(tenant):
        GoalStep.objects.create(run=run, iteration=2, kind=GoalStepKind.DREAM, name="sleep", summary="A jasmine sea.")
    client = login(member, tenant)

    page = client.get(reverse("agents:goal_run", args=[run.pk]), HTTP_ACCEPT_LANGUAGE="en").content.decode()

    assert "Iteration 1" in page and "Iteration 2" in page
    assert "memory_remember" in page and "Likes jasmine tea" in page and "A jasmine sea." in page
    assert 'id="goal-result"' in page and "Jasmine." in page and "js/goal_run.js" in page
    assert 'id="goal-stop" hidden' in page  # ended: nothing to stop
    state = client.get(reverse("agents:goal_run_state", args=[run.pk])).json()
    assert (state["status"], state["active"], state["waiting"]) == ("finished", False, False)
    assert "A jasmine sea." in state["html"]


def test_the_stop_button_requests_a_stop(tenant, member, start, login):
    run = start()
    client = login(member, tenant)
    assert 'id="goal-stop" hidden' not in client.get(reverse("agents:goal_run", args=[run.pk])).content.decode()
    assert client.get(reverse("agents:goal_run_stop", args=[run.pk])).status_code == 405
    assert client.post(reverse("agents:goal_run_stop", args=[run.pk])).status_code == 302
    assert fresh(tenant, run).stop_requested is True


def test_members_see_their_own_runs_admins_every_run_and_no_one_another_tenants(
    tenant, other_tenant, member, tenant_admin, other_tenant_admin, start, login, goal_agent
):
    colleague = UserFactory(username="colleague")
    MembershipFactory(tenant=tenant, user=colleague)
    mine, theirs = start(goal="mine"), start(user=colleague, goal="the colleague's")
    with tenant_scope(other_tenant):
        other_agent = agent_create(tenant=other_tenant, name="Other scout", kind="goal",
                                   token_overflow_config={"strategy": "none"})  # fmt: skip
        foreign = goal_run_start(agent=other_agent, user=other_tenant_admin, goal="foreign", queue=False)

    client = login(member, tenant)
    assert client.get(reverse("agents:goal_run", args=[mine.pk])).status_code == 200
    for run in (theirs, foreign):
        for name in ("agents:goal_run", "agents:goal_run_state"):
            assert client.get(reverse(name, args=[run.pk])).status_code == 404
        assert client.post(reverse("agents:goal_run_stop", args=[run.pk])).status_code == 404
    listing = client.get(reverse("agents:goal_list")).content.decode()
    assert f'data-run="{mine.pk}"' in listing and f'data-run="{theirs.pk}"' not in listing
    assert client.get(reverse("agents:goal_start", args=[other_agent.pk])).status_code == 404
    assert fresh(tenant, theirs).stop_requested is False

    client = login(tenant_admin, tenant)
    assert client.get(reverse("agents:goal_run", args=[theirs.pk])).status_code == 200
    assert client.get(reverse("agents:goal_run", args=[foreign.pk])).status_code == 404
    listing = client.get(reverse("agents:goal_list")).content.decode()
    assert f'data-run="{mine.pk}"' in listing and f'data-run="{theirs.pk}"' in listing
    assert f'data-run="{foreign.pk}"' not in listing


def test_a_run_can_only_be_started_for_a_goal_agent(tenant, member, login):
    with tenant_scope(tenant):
        chat = agent_create(tenant=tenant, name="Chatty", token_overflow_config={"strategy": "none"})
    client = login(member, tenant)
    assert client.get(reverse("agents:goal_start", args=[chat.pk])).status_code == 404


def test_the_agent_page_offers_a_run_and_the_planner_never_offers_a_goal_agent(tenant, member, goal_agent, login):
    from plans.services import agents_available

    page = login(member, tenant).get(reverse("agents:detail", args=[goal_agent.pk])).content.decode()
    assert reverse("agents:goal_start", args=[goal_agent.pk]) in page and 'id="start-goal-run"' in page
    with tenant_scope(tenant):
        agent_publish(agent=goal_agent, user=None)  # published, and still not offered: the kind keeps it out
        agent_publish(agent=agent_create(tenant=tenant, name="Helper", token_overflow_config={"strategy": "none"}),
                      user=None)  # fmt: skip
        assert [row["agentName"] for row in agents_available(tenant=tenant)] == ["Helper"]


def test_the_admin_lists_goal_runs_read_only(tenant, tenant_admin, start, login):
    run = start()
    client = login(tenant_admin, tenant)
    listing = client.get(reverse("admin:agents_goalrun_changelist") + "?status__exact=running").content.decode()
    assert GOAL[:40] in listing
    page = client.get(reverse("admin:agents_goalrun_change", args=[run.pk])).content.decode()
    assert GOAL in page and 'name="goal"' not in page  # shown, not editable
    assert client.get(reverse("admin:agents_goalrun_add")).status_code == 403


# --- the chat -------------------------------------------------------------------------------------------------------


def test_a_goal_agent_in_the_chat_points_to_its_run_page(tenant, member, goal_agent, scripted_llm):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=goal_agent, user=member)

    _user, reply, sink = async_to_sync(user_turn)(tenant, conversation, "Find me a good tea")

    url = reverse("agents:goal_start", args=[goal_agent.pk])
    assert sink.result.status == "completed" and f"]({url})" in reply.content
    assert "long-lived goal agent" in reply.content
    assert scripted_llm.requests() == []  # no model call: a goal agent does not chat


# --- pieces -----------------------------------------------------------------------------------------------------------


def test_the_history_window_keeps_the_kickoff_and_never_starts_at_a_tool_result():
    kickoff = ChatMessage.user("Begin")
    exchange = [
        ChatMessage.assistant(None, tool_calls=[{"id": "a"}, {"id": "b"}]),
        ChatMessage.tool("a", "1"),
        ChatMessage.tool("b", "2"),
    ]
    messages = [kickoff, *exchange * 10]
    window = history_window(messages, size=8)
    assert window[0] == kickoff and window[1].role == "assistant" and len(window) == 7
    assert history_window(messages[:5], size=8) == messages[:5]
