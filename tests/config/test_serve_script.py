"""scripts/serve, which `make run` and a deployment start the platform with: Daphne with config.serving's options on
a socket the script opens, serving until SIGTERM, which stops it and its children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from config.serving import DAPHNE_OPTIONS
from tests.processes import ROOT, database_url, free_port, require_postgresql

pytestmark = pytest.mark.django_db(transaction=True)


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _healthz(port: int, deadline: float) -> dict:
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_serve_starts_daphne_with_the_projects_options_and_stops_on_sigterm(redis_url, tmp_path):
    require_postgresql("scripts/serve's test")
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": database_url()}
    env.update(REDIS_URL=redis_url, LOG_LEVEL="WARNING")
    command = [sys.executable, str(ROOT / "scripts" / "serve"), "--web", "1", "--workers", "0", "--port", str(port)]
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        serve = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    web = None
    try:
        health = _healthz(port, time.monotonic() + 60)
        assert health["status"] == "ok", health
        (web,) = _children(serve.pid)
        arguments = Path(f"/proc/{web}/cmdline").read_bytes().decode().split("\0")
        after = next(n for n, argument in enumerate(arguments) if argument.endswith("daphne")) + 1
        assert list(DAPHNE_OPTIONS) == arguments[after : after + len(DAPHNE_OPTIONS)], arguments
        assert "--fd" in arguments and "config.asgi:application" in arguments
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=30) == 0, log.read_text()
        assert not Path(f"/proc/{web}").exists() or "zombie" in Path(f"/proc/{web}/status").read_text()
    finally:
        if serve.poll() is None:  # a failed test: its Daphne too, not only the script
            for pid in [web] if web else _children(serve.pid):
                os.kill(pid, signal.SIGKILL)
            serve.kill()
            serve.wait(timeout=10)
