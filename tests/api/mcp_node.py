"""Node and the packages pinned in scripts/mcp-conformance (the conformance suite, mcp-remote), for the MCP tests
that run them: a skip without them locally, a failure in CI (REQUIRE_SERVICES=1), where `make test` installs them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import REQUIRE_SERVICES

FOLDER: Path = settings.BASE_DIR / "scripts" / "mcp-conformance"
MODULES = FOLDER / "node_modules"
SUITE = MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
MCP_REMOTE = MODULES / "mcp-remote" / "dist" / "proxy.js"


@pytest.fixture
def node() -> str:
    """The node binary, with the pinned packages installed."""
    found = shutil.which("node")
    problem = None
    if found is None:
        problem = "node is not installed (apt-get install nodejs npm)"
    elif not (SUITE.exists() and MCP_REMOTE.exists()):
        problem = "the pinned MCP packages are not installed: make mcp-conformance (npm ci in scripts/mcp-conformance)"
    if problem:
        if REQUIRE_SERVICES:
            pytest.fail(f"{problem}, and REQUIRE_SERVICES=1")
        pytest.skip(problem)
    return found
