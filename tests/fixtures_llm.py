"""Fixtures for the model gateway: `scripted_llm`, the scripted OpenAI-compatible server on 127.0.0.1.

The server (`python -m llm.fake_server`) runs as a subprocess for the whole session; each test gets it reset
with a default script, and can replace the script and read the requests the server received.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from typing import Any

import pytest

from llm.fake_server import spawn

DEFAULT_SCRIPT: dict[str, Any] = {
    "defaults": {"delay": 0.001},
    "models": ["scripted"],
    "rules": [{"name": "echo", "when": {}, "reply": {"text": "You said: {last_message}"}}],
}


class ScriptedLLM:
    """Handle on the running fake server: its base URL, its script, the requests it saw."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return json.loads(response.read())

    def set_script(self, script: dict[str, Any]) -> None:
        """Replace the script (rule counters start again)."""
        self._call("PUT", "/_control/script", script)

    def set_rules(self, *rules: dict[str, Any], defaults: dict[str, Any] | None = None) -> None:
        """Shorthand: a script made of these rules."""
        self.set_script({"defaults": defaults or {"delay": 0.001}, "rules": list(rules)})

    def requests(self, path_suffix: str = "/chat/completions") -> list[dict[str, Any]]:
        """Requests received since the last reset whose path ends with `path_suffix` ("" for all)."""
        return [r for r in self._call("GET", "/_control/requests")["requests"] if r["path"].endswith(path_suffix)]

    def reset(self, script: dict[str, Any] | None = None) -> None:
        self._call("POST", "/_control/reset")
        self.set_script(script or DEFAULT_SCRIPT)


@pytest.fixture(scope="session")
def scripted_llm_server():
    process, port = spawn(DEFAULT_SCRIPT)
    try:
        yield ScriptedLLM(port)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def scripted_llm(scripted_llm_server: ScriptedLLM) -> ScriptedLLM:
    """The scripted OpenAI-compatible server, reset to the default echo script for this test."""
    scripted_llm_server.reset()
    return scripted_llm_server
