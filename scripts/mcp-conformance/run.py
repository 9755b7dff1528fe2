#!/usr/bin/env python3
"""The official MCP conformance suite (@modelcontextprotocol/conformance, pinned in package.json), both sides.

    npm ci --prefix scripts/mcp-conformance
    python scripts/mcp-conformance/run.py server --url http://127.0.0.1:8000/mcp --key ak-… [--output-dir DIR]
    python scripts/mcp-conformance/run.py client [--output-dir DIR]

`server`: the suite's server scenarios against /mcp, every one that applies to a server of agents (APPLICABLE). The
suite's client sends no API key, so its requests go through a small proxy on 127.0.0.1 that adds
`Authorization: Bearer <key>` to each and passes everything else (Host and Origin included: the DNS-rebinding
scenario sends foreign ones) as it is. `client`: the suite's test servers against the platform's own MCP client
(client.py drives toolservers.client). The scenarios that cannot apply are reported with their reason
(NOT_APPLICABLE, CLIENT_NOT_APPLICABLE; also in docs/mcp.md). Prints one line a scenario and a JSON summary on the
last line; exits 0 when every applicable scenario passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
SUITE = HERE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
SCENARIO_TIMEOUT_SECONDS = 120

APPLICABLE = ("server-initialize", "ping", "tools-list", "dns-rebinding-protection")
_FIXTURE_TOOL = "it calls a tool of the suite's reference server by its name (%s); the platform's tools are its agents"
NOT_APPLICABLE = {
    "logging-set-level": "the server declares no logging capability (a turn's progress goes out as progress)",
    "completion-complete": "the server offers no prompts or resource templates to complete",
    "tools-call-simple-text": _FIXTURE_TOOL % "test_simple_text",
    "tools-call-image": _FIXTURE_TOOL % "test_image_content",
    "tools-call-audio": _FIXTURE_TOOL % "test_audio_content",
    "tools-call-embedded-resource": _FIXTURE_TOOL % "test_embedded_resource",
    "tools-call-mixed-content": _FIXTURE_TOOL % "test_multiple_content_types",
    "tools-call-with-logging": _FIXTURE_TOOL % "test_tool_with_logging",
    "tools-call-error": _FIXTURE_TOOL % "test_error_handling",
    "tools-call-with-progress": _FIXTURE_TOOL % "test_tool_with_progress"
    + " (the platform's progress is tested in tests/api/test_mcp_progress.py)",
    "tools-call-sampling": "the server asks the client for nothing (no sampling): the agent's own model answers",
    "tools-call-elicitation": "the server asks the client for nothing (no elicitation)",
    "elicitation-sep1034-defaults": "the server asks the client for nothing (no elicitation)",
    "elicitation-sep1330-enums": "the server asks the client for nothing (no elicitation)",
    "json-schema-2020-12": _FIXTURE_TOOL % "json_schema_2020_12_tool",
    "server-sse-polling": "stateless server: no session and no event store to resume a stream from, GET is 405 (the "
    "suite only warns that there is no session)",
    "server-sse-multiple-streams": "stateless server: no session and no GET stream (the suite only warns that there "
    "is no session)",
    "resources-list": "the server offers no resources",
    "resources-read-text": "the server offers no resources",
    "resources-read-binary": "the server offers no resources",
    "resources-templates-read": "the server offers no resources",
    "resources-subscribe": "the server offers no resources",
    "resources-unsubscribe": "the server offers no resources",
    "prompts-list": "the server offers no prompts",
    "prompts-get-simple": "the server offers no prompts",
    "prompts-get-with-args": "the server offers no prompts",
    "prompts-get-embedded-resource": "the server offers no prompts",
    "prompts-get-with-image": "the server offers no prompts",
}


CLIENT_APPLICABLE = ("initialize", "tools_call", "sse-retry")
_NO_OAUTH = "the platform's client sends the bearer token or headers an admin set for the server: no OAuth flow"
_OAUTH_SCENARIOS = [
    "metadata-default",
    "metadata-var1",
    "metadata-var2",
    "metadata-var3",
    "basic-cimd",
    "scope-from-www-authenticate",
    "scope-from-scopes-supported",
    "scope-omitted-when-undefined",
    "scope-step-up",
    "scope-retry-limit",
    "token-endpoint-auth-basic",
    "token-endpoint-auth-post",
    "token-endpoint-auth-none",
    "resource-mismatch",
    "pre-registration",
    "2025-03-26-oauth-metadata-backcompat",
    "2025-03-26-oauth-endpoint-fallback",
    "client-credentials-jwt",
    "client-credentials-basic",
]
CLIENT_NOT_APPLICABLE = {
    "elicitation-sep1034-client-defaults": "the platform's client runs tools for a model, with nobody to ask: it "
    "declares no elicitation",
    **{f"auth/{name}": _NO_OAUTH for name in _OAUTH_SCENARIOS},
}


class KeyProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 that adds the key to each request and closes each connection after one answer
    (so no request framing beyond Content-Length is needed; the answer, an SSE stream included, is piped as read)."""

    def __init__(self, upstream: str, key: str) -> None:
        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.key = key
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="mcp-key-proxy", daemon=True)

    def __enter__(self) -> KeyProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")[:-2]
            kept = [line for line in lines[1:] if line.split(":", 1)[0].strip().lower() != "connection"]
            if not any(line.lower().startswith("authorization:") for line in kept):
                kept.append(f"Authorization: Bearer {self.key}")
            lengths = [line.split(":", 1)[1] for line in kept if line.lower().startswith("content-length:")]
            length = int(lengths[0]) if lengths else 0
            body = await reader.readexactly(length) if length else b""
            upstream_reader, upstream_writer = await asyncio.open_connection(self.host, self.port)
            request = "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1") + body
            upstream_writer.write(request)
            await upstream_writer.drain()
            while chunk := await upstream_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
            upstream_writer.close()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                writer.close()


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        raise SystemExit("node is not installed")
    return node


def _checks(command: list[str], scenario: str, output_dir: Path) -> list[dict]:
    """Run the suite's command; the checks it saved (each a dict with id, status: SUCCESS, FAILURE, WARNING...)."""
    completed = subprocess.run(  # noqa: S603 (our own pinned suite, our arguments)
        command, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_SECONDS, check=False
    )
    found = sorted(output_dir.glob("**/checks.json"))
    if not found:
        return [{"id": scenario, "status": "FAILURE", "errorMessage": (completed.stdout + completed.stderr)[-2000:]}]
    return json.loads(found[-1].read_text())


def _outcome(checks: list[dict]) -> dict:
    failed = [check for check in checks if check.get("status") == "FAILURE"]
    return {"passed": bool(checks) and not failed, "failed": failed, "checks": len(checks)}


def run_server(url: str, key: str | None, scenarios: tuple[str, ...], output_dir: Path) -> dict[str, dict]:
    """Each server scenario's outcome against `url`: {"passed": bool, "failed": [checks that failed], "checks": n}."""
    outcomes: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        target = url
        if key:
            proxy = stack.enter_context(KeyProxy(url, key))
            parts = urlsplit(url)
            target = urlunsplit(("http", urlsplit(proxy.url).netloc, parts.path, parts.query, ""))
        for scenario in scenarios:
            folder = output_dir / scenario.replace("/", "-")
            command = [_node(), str(SUITE), "server", "--url", target, "--scenario", scenario, "-o", str(folder)]
            outcomes[scenario] = _outcome(_checks(command, scenario, folder))
    return outcomes


def run_client(scenarios: tuple[str, ...], output_dir: Path) -> dict[str, dict]:
    """Each client scenario's outcome, the platform's client (client.py) against the suite's test server."""
    outcomes: dict[str, dict] = {}
    client = f"{sys.executable} {HERE / 'client.py'}"
    for scenario in scenarios:
        folder = output_dir / scenario.replace("/", "-")
        command = [_node(), str(SUITE), "client", "--command", client, "--scenario", scenario, "-o", str(folder)]
        outcomes[scenario] = _outcome(_checks(command, scenario, folder))
    return outcomes


def _report(outcomes: dict[str, dict], not_applicable: dict[str, str]) -> int:
    for scenario, outcome in outcomes.items():
        verdict = "PASS" if outcome["passed"] else "FAIL"
        print(f"{verdict} {scenario} ({outcome['checks']} checks)")
        for check in outcome["failed"]:
            print(f"     {check.get('id')}: {check.get('errorMessage') or check.get('description')}")
    for scenario, reason in not_applicable.items():
        print(f"N/A  {scenario}: {reason}")
    print(json.dumps({"outcomes": outcomes, "not_applicable": not_applicable}, ensure_ascii=False))
    return 0 if all(outcome["passed"] for outcome in outcomes.values()) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("side", choices=["server", "client"], help="test /mcp, or the platform's MCP client")
    parser.add_argument("--url", help="server: the MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    parser.add_argument("--key", help="server: an API key with the mcp scope (sent by the proxy)")
    parser.add_argument("--scenario", action="append", help="only these scenarios (default: every applicable one)")
    parser.add_argument("--output-dir", type=Path, help="keep the suite's checks.json files here")
    args = parser.parse_args()
    if args.side == "server" and not args.url:
        parser.error("server needs --url")
    with tempfile.TemporaryDirectory() as scratch:
        output_dir = args.output_dir or Path(scratch)
        if args.side == "server":
            outcomes = run_server(args.url, args.key, tuple(args.scenario or APPLICABLE), output_dir)
            return _report(outcomes, NOT_APPLICABLE)
        return _report(run_client(tuple(args.scenario or CLIENT_APPLICABLE), output_dir), CLIENT_NOT_APPLICABLE)


if __name__ == "__main__":
    sys.exit(main())
