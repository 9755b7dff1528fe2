"""The publish gate (evals.gate through agents.publishgate): off, Publish goes as before; on, it needs a finished run
of the draft as it is now reaching the threshold and not below the published version's run; the decision is kept on
the version; the page, the admin action and the API say why it refused."""

from __future__ import annotations

import pytest

from agents.models import AgentVersion
from agents.publishgate import PublishRefused
from agents.services import agent_ensure, agent_publish, agent_update
from evals.gate import GateOutcome
from evals.models import Run, RunStatus
from evals.services import gate_update
from tenants.scope import tenant_scope


def _run(dataset, *, version=None, passed: int, failed: int, snapshot=None, status=RunStatus.DONE) -> Run:
    agent = dataset.agent
    return Run.objects.create(
        tenant=agent.tenant, dataset=dataset, agent=agent, version=version, status=status,
        snapshot=agent.snapshot() if snapshot is None and version is None else (snapshot or {}),
        total=passed + failed, done=passed + failed, passed=passed, failed=failed,
    )  # fmt: skip


@pytest.fixture
def gated(tenant, eval_agent, dataset):
    with tenant_scope(tenant):
        gate_update(agent=eval_agent, enabled=True, dataset=dataset, threshold=0.8)
    return eval_agent


def test_off_publish_goes_and_the_version_says_no_gate_was_asked(tenant, eval_agent, tenant_admin):
    with tenant_scope(tenant):
        version = agent_publish(agent=eval_agent, user=tenant_admin)
        assert version.gate["required"] is False and version.gate["outcome"] == GateOutcome.OFF


def test_on_it_refuses_without_a_run_of_the_draft_as_it_is_now(tenant, gated, dataset):
    with tenant_scope(tenant):
        with pytest.raises(PublishRefused, match="run it, then publish") as refused:
            agent_publish(agent=gated, user=None)
        assert refused.value.decision.record["outcome"] == GateOutcome.NO_RUN
        _run(dataset, passed=5, failed=0)
        agent_update(agent=gated, system_prompt="Changed after the run.")
        with pytest.raises(PublishRefused):  # the run was of another draft
            agent_publish(agent=gated, user=None)
        _run(dataset, passed=5, failed=0, status=RunStatus.STOPPED)
        with pytest.raises(PublishRefused):  # a stopped run is not a finished one
            agent_publish(agent=gated, user=None)
        assert gated.versions.count() == 1


def test_on_it_refuses_under_the_threshold_and_allows_at_it_recording_the_decision(tenant, gated, dataset):
    with tenant_scope(tenant):
        low = _run(dataset, passed=3, failed=2)
        with pytest.raises(PublishRefused, match="60%") as refused:
            agent_publish(agent=gated, user=None)
        assert refused.value.decision.record["outcome"] == GateOutcome.BELOW_THRESHOLD
        assert refused.value.decision.record["run"] == low.pk
        good = _run(dataset, passed=4, failed=1)
        version = agent_publish(agent=gated, user=None)
        assert version.gate["allowed"] is True and version.gate["outcome"] == GateOutcome.PASSED
        assert (version.gate["run"], version.gate["pass_rate"], version.gate["dataset"]) == (good.pk, 0.8, dataset.pk)
        assert AgentVersion.objects.get(pk=version.pk).gate == version.gate  # stored with the version


def test_on_it_refuses_a_draft_below_the_published_versions_run(tenant, gated, dataset):
    with tenant_scope(tenant):
        _run(dataset, version=gated.published_version(), passed=10, failed=0)
        _run(dataset, passed=9, failed=1)
        with pytest.raises(PublishRefused, match="step back") as refused:
            agent_publish(agent=gated, user=None)
        assert refused.value.decision.record["published_pass_rate"] == 1.0
        _run(dataset, passed=10, failed=0)
        assert agent_publish(agent=gated, user=None).gate["published_run"]


def test_on_whose_dataset_was_deleted_it_refuses_saying_so(tenant, gated, dataset):
    with tenant_scope(tenant):
        dataset.delete()
        with pytest.raises(PublishRefused, match="no dataset"):
            agent_publish(agent=gated, user=None)


def test_demo_seeding_is_not_gated(tenant, gated):
    with tenant_scope(tenant):
        _agent, published = agent_ensure(tenant=tenant, spec={"name": gated.name, "system_prompt": "Seeded."})
        assert published and gated.published_version().gate == {"required": False, "allowed": True}


@pytest.mark.parametrize("door", ["page", "api"])
def test_the_doors_say_why_the_gate_refused(door, tenant, tenant_admin, gated, login):
    client = login(tenant_admin, tenant)
    if door == "api":
        response = client.post(f"/api/v1/agents/{gated.pk}/publish/")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "publish_gate"
        assert "run it, then publish" in response.json()["error"]["message"]
    else:
        response = client.post(f"/agents/{gated.pk}/publish/", follow=True)
        assert "run it, then publish" in response.content.decode()
    with tenant_scope(tenant):
        assert gated.versions.count() == 1


def test_the_admin_action_says_why_and_publishes_the_others(tenant, superuser, gated, other_agent, client):
    client.force_login(superuser)
    response = client.post("/admin/agents/agent/", {"action": "publish", "_selected_action": [gated.pk]}, follow=True)
    assert "run it, then publish" in response.content.decode()
    with tenant_scope(tenant):
        assert gated.versions.count() == 1
