"""Platform processes for tests that need them as deployed: Daphne servers on the test database and Redis."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
APPLICATION = "config.asgi:application"


def database_url() -> str:
    """The test database (test_<name>) as a DATABASE_URL, for another process."""
    db = connection.settings_dict
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    user = quote(db["USER"] or "", safe="")
    return f"postgres://{user}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def require_postgresql(what: str) -> None:
    if connection.vendor != "postgresql":
        pytest.fail(f"{what} needs PostgreSQL: set DATABASE_URL (the other processes must reach the test database).")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    log: Path

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@contextmanager
def daphne_servers(count: int, *, env: dict[str, str], log_dir: Path) -> Iterator[list[Server]]:
    """`count` Daphne processes serving config.asgi with the test settings and `env`; stopped afterwards."""
    base = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": database_url(), **env}
    servers: list[Server] = []
    try:
        for number in range(count):
            port = _free_port()
            log = log_dir / f"daphne-{number}.log"
            with log.open("w") as out:
                command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), APPLICATION]
                process = subprocess.Popen(command, cwd=ROOT, env=base, stdout=out, stderr=subprocess.STDOUT)
            servers.append(Server(process, port, log))
        for server in servers:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
                    break
                except OSError:
                    if server.process.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(f"Daphne did not start:\n{server.output()}")
                    time.sleep(0.1)
        yield servers
    finally:
        for server in servers:
            server.process.terminate()
        for server in servers:
            try:
                server.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait(timeout=10)
