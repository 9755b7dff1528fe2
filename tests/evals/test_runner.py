"""Evaluation runs (evals.runner): a run goes through the engine's admission in the background, stores each case's
reply, verdicts, tokens, latency and conversation, runs at most its concurrency at once, stops keeping what it did,
warns before a budget it may pass and ends when the budget is spent, and never reaches a person's memory or lists."""

from __future__ import annotations

import pytest

from agents.services import agent_publish, agent_update
from chat.selectors import conversation_list
from evals.models import CaseResult, ResultStatus, Run, RunStatus
from evals.runner import BudgetWarning, RunRefused, run_line, run_progress, run_start, run_stop
from evals.services import case_create, dataset_create
from memory.models import Conversation, ConversationSource, Event
from memory.services import extract_line
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _runs_end():
    yield
    run_line.wait(timeout=30)  # nothing of a test runs on after it


def _finished(run: Run, timeout: float = 30) -> Run:
    assert run_line.wait(timeout=timeout)
    run.refresh_from_db()
    return run


def _dataset_of(agent, count: int, name: str = "Many"):
    with tenant_scope(agent.tenant):
        dataset = dataset_create(agent=agent, name=name)
        for n in range(count):
            case_create(dataset=dataset, title=f"Case {n}", turns=[f"Question {n}"],
                        expectations=[{"kind": "contains", "text": f"Question {n}"}])  # fmt: skip
        return dataset


def test_a_run_stores_each_cases_reply_verdicts_tokens_latency_and_conversation(tenant, tenant_admin, dataset):
    with tenant_scope(tenant):
        run = run_start(dataset=dataset, version=None, user=tenant_admin)
        assert run.snapshot == dataset.agent.snapshot()  # the draft as it was when the run started
        run = _finished(run)
        assert (run.status, run.total, run.done, run.passed, run.failed, run.errored) == (RunStatus.DONE, 2, 2, 2, 0, 0)
        assert run.pass_rate == 1.0 and run.tokens > 0 and run.finished_at is not None
        results = list(CaseResult.objects.filter(run=run).select_related("conversation").order_by("position"))
        assert [result.title for result in results] == ["Greets", "Two turns"]
        first, second = results
        assert first.status == ResultStatus.PASSED and first.reply == "You said: Hello"
        assert first.verdicts == [{"kind": "contains", "passed": True, "detail": first.verdicts[0]["detail"]}]
        assert first.tokens_in > 0 and first.tokens_out > 0 and first.latency_ms > 0
        assert first.conversation.source == ConversationSource.EVAL and first.conversation.is_test
        # A case's turns run in order in its own conversation; the reply judged is the last one's.
        assert second.reply == "You said: Is that good?"
        assert list(second.conversation.messages.values_list("role", flat=True)) == ["user", "assistant"] * 2
        assert run_progress(run)["results"] == [
            {"position": first.position, "title": "Greets", "status": "passed"},
            {"position": second.position, "title": "Two turns", "status": "passed"},
        ]


def test_a_failed_expectation_fails_the_case_with_its_verdict(tenant, tenant_admin, eval_agent, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "The roof faces north."}})
    with tenant_scope(tenant):
        dataset = dataset_create(agent=eval_agent, name="North")
        case_create(dataset=dataset, turns=["Where?"], expectations=[{"kind": "not_contains", "text": "north"}])
        run = _finished(run_start(dataset=dataset, version=None, user=tenant_admin))
        assert (run.passed, run.failed, run.pass_rate) == (0, 1, 0.0)
        result = run.results.get()
        assert result.status == ResultStatus.FAILED and result.verdicts[0]["passed"] is False


def test_a_run_of_an_older_published_version_runs_that_version(tenant, tenant_admin, eval_agent, scripted_llm):
    with tenant_scope(tenant):
        first = eval_agent.published_version()
        agent_update(agent=eval_agent, system_prompt="A NEWER PROMPT")
        agent_publish(agent=eval_agent, user=None)
        dataset = _dataset_of(eval_agent, 1)
        run = _finished(run_start(dataset=dataset, version=first, user=tenant_admin))
        assert run.status == RunStatus.DONE and run.snapshot == {}
        conversation = run.results.get().conversation
        assert conversation.version_id == first.pk and not conversation.is_test
    systems = [request["body"]["messages"][0]["content"] for request in scripted_llm.requests()]
    assert systems and all("solar panels" in system and "NEWER" not in system for system in systems)


def test_at_most_the_runs_concurrency_of_cases_run_at_once(tenant, tenant_admin, eval_agent, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 8, "delay": 0.04}})  # a reply takes ~0.3 s
    dataset = _dataset_of(eval_agent, 6)
    with tenant_scope(tenant):
        run = _finished(run_start(dataset=dataset, version=None, user=tenant_admin, concurrency=2))
    assert run.done == 6
    arrived = sorted(request["time"] for request in scripted_llm.requests())
    assert len(arrived) == 6
    # Two at a time: the first two arrive together, the third only once one of them answered.
    assert arrived[1] - arrived[0] < 0.25
    assert all(arrived[n + 2] - arrived[n] > 0.25 for n in range(4))


def test_a_run_stopped_halfway_keeps_what_it_did(tenant, tenant_admin, eval_agent, scripted_llm):
    scripted_llm.set_rules({"when": {}, "reply": {"text_tokens": 8, "delay": 0.03}})
    dataset = _dataset_of(eval_agent, 8)
    with tenant_scope(tenant):
        run = run_start(dataset=dataset, version=None, user=tenant_admin, concurrency=1)
        deadline = 200
        while Run.objects.get(pk=run.pk).done < 2 and deadline:
            run_line.wait(timeout=0.05)
            deadline -= 1
        run_stop(run=run)
        run = _finished(run)
        assert run.status == RunStatus.STOPPED and run.stop_requested
        assert 2 <= run.done < 8 and run.results.count() == run.done
        assert all(result.reply and result.conversation_id for result in run.results.all())
        assert run_progress(run)["finished"] is True


def test_a_queued_run_stopped_before_it_starts_runs_nothing(tenant, tenant_admin, dataset):
    with tenant_scope(tenant):
        run = Run.objects.create(tenant=tenant, dataset=dataset, agent=dataset.agent, total=2, started_by=tenant_admin)
        assert run_stop(run=run).status == RunStatus.STOPPED
        run_start(dataset=dataset, version=None, user=tenant_admin)  # the stopped one does not hold the dataset


def test_the_budget_is_warned_of_before_and_a_spent_budget_ends_the_run(tenant, tenant_admin, eval_agent):
    dataset = _dataset_of(eval_agent, 8)
    tenant.monthly_token_budget = 60  # two cases (26 tokens each); a reply may pass it by its own length
    tenant.save(update_fields=["monthly_token_budget"])
    with tenant_scope(tenant):
        with pytest.raises(BudgetWarning) as warned:
            run_start(dataset=dataset, version=None, user=tenant_admin)
        assert warned.value.estimate > 60 >= warned.value.remaining
        assert "60" in warned.value.message and not Run.objects.exists()
        run = run_start(dataset=dataset, version=None, user=tenant_admin, concurrency=1, confirm_budget=True)
        run = _finished(run)
        assert run.status == RunStatus.STOPPED and ("budget" in run.error or "预算" in run.error)
        assert 2 <= run.done < 8 and run.results.count() == run.done
        assert run.results.filter(status=ResultStatus.PASSED).count() >= 2


def test_a_run_never_makes_memories_nor_shows_in_a_persons_lists(tenant, tenant_admin, eval_agent, login):
    with tenant_scope(tenant):
        agent_update(agent=eval_agent, long_term_memory=True)
        agent_publish(agent=eval_agent, user=None)
        dataset = _dataset_of(eval_agent, 2)
        run = _finished(run_start(dataset=dataset, version=eval_agent.published_version(), user=tenant_admin))
        assert run.done == 2
        extract_line.wait(timeout=10)
        assert not Event.objects.exists()
        assert Conversation.objects.filter(source=ConversationSource.EVAL).count() == 2
        assert conversation_list(user=tenant_admin, with_tests=True) == []
        opened = run.results.first().conversation_id
    client = login(tenant_admin, tenant)
    listed = client.get("/api/v1/conversations/")
    assert listed.status_code == 200 and listed.json()["results"] == []
    # An administrator still opens one from the run's results.
    assert client.get(f"/api/v1/conversations/{opened}/").status_code == 200


def test_what_cannot_start(tenant, other_tenant, tenant_admin, member, eval_agent, dataset, other_agent):
    with tenant_scope(other_tenant):
        theirs = other_agent.versions.get()
    with tenant_scope(tenant):
        empty = dataset_create(agent=eval_agent, name="Empty")
        with pytest.raises(RunRefused, match="no cases"):
            run_start(dataset=empty, version=None, user=tenant_admin)
        with pytest.raises(RunRefused, match="administrators"):
            run_start(dataset=dataset, version=None, user=member)
        with pytest.raises(RunRefused, match="another agent"):
            run_start(dataset=dataset, version=theirs, user=tenant_admin)
        run = run_start(dataset=dataset, version=None, user=tenant_admin)
        if Run.objects.get(pk=run.pk).status in (RunStatus.QUEUED, RunStatus.RUNNING):
            with pytest.raises(RunRefused, match="already running"):
                run_start(dataset=dataset, version=None, user=tenant_admin)
