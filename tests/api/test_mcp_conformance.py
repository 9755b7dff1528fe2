"""The official MCP conformance suite (@modelcontextprotocol/conformance, pinned in scripts/mcp-conformance), both
sides: its server scenarios against /mcp on Daphne, its client scenarios against the platform's own MCP client
(toolservers.client, driven by scripts/mcp-conformance/client.py). Every scenario that applies passes, and every
scenario the suite has is either run or listed with the reason it cannot apply (scripts/mcp-conformance/run.py,
docs/mcp.md).

Needs node and the pinned packages (`make mcp-conformance`, which `make test` runs); without them the tests skip,
and with REQUIRE_SERVICES=1 (CI) they fail instead (tests.api.mcp_node)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from django.conf import settings

from api.models import KeyScope
from tests.api import mcp_node
from tests.api.mcp_node import FOLDER, SUITE

pytestmark = pytest.mark.django_db(transaction=True)

RUNNER = FOLDER / "run.py"
node = mcp_node.node  # the fixture


def _runner():
    sys.path.insert(0, str(FOLDER))
    try:
        import run as runner  # scripts/mcp-conformance/run.py (a script, not a package: on the path for this)
    finally:
        sys.path.remove(str(FOLDER))
    return runner


def _listed(node: str) -> tuple[set[str], set[str]]:
    """The suite's server and client scenarios, as `conformance list` names them."""
    listed = subprocess.run([node, str(SUITE), "list"], capture_output=True, text=True, timeout=60, check=True)
    server_part, client_part = listed.stdout.split("Client scenarios")
    pattern = re.compile(r"^\s+- (\S+)$", flags=re.MULTILINE)
    return set(pattern.findall(server_part)), set(pattern.findall(client_part))


def test_every_scenario_of_the_suite_is_run_or_listed_with_its_reason(node):
    server, client = _listed(node)
    runner = _runner()
    assert {"server-initialize", "ping", "tools-list", "dns-rebinding-protection"} <= server
    assert server == set(runner.APPLICABLE) | set(runner.NOT_APPLICABLE), "a server scenario neither run nor explained"
    assert not set(runner.APPLICABLE) & set(runner.NOT_APPLICABLE)
    assert {"initialize", "tools_call"} <= client
    assert client == set(runner.CLIENT_APPLICABLE) | set(runner.CLIENT_NOT_APPLICABLE), "a client scenario unexplained"
    docs = (settings.BASE_DIR / "docs" / "mcp.md").read_text()
    missing = [name for name in sorted(server | client) if f"`{name}`" not in docs and not name.startswith("auth/")]
    assert not missing, f"docs/mcp.md does not list {missing}"


def _run(arguments: list[str], tmp_path) -> tuple[dict, str, int]:
    command = [sys.executable, str(RUNNER), *arguments, "--output-dir", str(tmp_path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stdout, completed.returncode


def test_the_applicable_server_scenarios_pass(node, asgi_live_server, published, tenant_admin, make_key, tmp_path):
    _key, secret = make_key(tenant_admin, scopes=[KeyScope.MCP])
    report, output, returncode = _run(["server", "--url", f"{asgi_live_server.url}/mcp", "--key", secret], tmp_path)
    outcomes = report["outcomes"]
    assert set(outcomes) == set(_runner().APPLICABLE)
    assert not [name for name, outcome in outcomes.items() if not outcome["passed"]], output
    assert all(outcome["checks"] > 0 for outcome in outcomes.values()) and returncode == 0


def test_the_applicable_client_scenarios_pass_with_the_platforms_client(node, tmp_path):
    report, output, returncode = _run(["client"], tmp_path)
    failed = [name for name, outcome in report["outcomes"].items() if not outcome["passed"]]
    if failed == ["sse-retry"]:
        # Its one timing check (the reconnect waits the retry hint, within 50 ms) was seen to fail once on a loaded
        # machine with a negative delay (the suite's own clock): measured again once, never more.
        again = tmp_path / "again"
        again.mkdir()
        report, output, returncode = _run(["client"], again)
    outcomes = report["outcomes"]
    assert set(outcomes) == set(_runner().CLIENT_APPLICABLE)
    assert not [name for name, outcome in outcomes.items() if not outcome["passed"]], output
    assert outcomes["tools_call"]["checks"] > 1 and returncode == 0
