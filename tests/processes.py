"""Platform processes for tests that need them as deployed: Daphne servers and Celery workers on the test database
and Redis."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from config.serving import DAPHNE_OPTIONS

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


def free_port() -> int:
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
            port = free_port()
            log = log_dir / f"daphne-{number}.log"
            with log.open("w") as out:
                where = ["-b", "127.0.0.1", "-p", str(port)]
                command = [sys.executable, "-m", "daphne", *DAPHNE_OPTIONS, *where, APPLICATION]
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


@dataclass
class Worker:
    """A `celery -A config worker` process of a test."""

    process: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def pool_processes(self) -> list[int]:
        """The pids of its pool's processes (prefork; none with the solo pool, which runs tasks itself)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            return [int(pid) for pid in children.read_text().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL: no shutdown, no acknowledgement, no message put back (what a lost machine does)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        for pid in self.pool_processes():  # a pool left behind by a killed parent
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class Workers:
    """Starts Celery workers on the test database and `redis_url` (tasks from this process reach them once it sends
    them to the broker: `current_app.conf.task_always_eager = False`); stops every one it started."""

    def __init__(self, *, redis_url: str, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": database_url(),
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": redis_url,
            "CELERY_TASK_ALWAYS_EAGER": "0",
            **(env or {}),
        }
        self.started: list[Worker] = []

    def purge(self) -> None:
        """Empty the broker: the default queue and the messages that earlier workers took and never acknowledged."""
        import redis

        client = redis.Redis.from_url(self.redis_url)
        client.delete("celery", "unacked", "unacked_index", "unacked_mutex")
        client.close()

    def start(self, *, pool: str = "solo", name: str = "worker") -> Worker:
        """A worker with one pool process (`pool` "solo": the worker runs tasks itself; "prefork": in a child)."""
        log = self.log_dir / f"{name}-{len(self.started)}.log"
        command = [sys.executable, "-m", "celery", "-A", "config", "worker", f"--pool={pool}", "--concurrency=1",
                   "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
                   "-n", f"{name}-{os.getpid()}-{len(self.started)}@%h"]  # fmt: skip
        with log.open("w") as out:
            process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        worker = Worker(process, log)
        self.started.append(worker)
        deadline = time.monotonic() + 60
        while "ready." not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"The Celery worker did not start:\n{worker.output()}")
            time.sleep(0.2)
        return worker

    def stop_all(self) -> None:
        for worker in self.started:
            worker.stop()


@contextmanager
def celery_workers(*, redis_url: str, log_dir: Path, env: dict[str, str] | None = None) -> Iterator[Workers]:
    """`Workers` on an empty broker; every worker started is stopped afterwards."""
    workers = Workers(redis_url=redis_url, log_dir=log_dir, env=env)
    workers.purge()
    try:
        yield workers
    finally:
        workers.stop_all()
