"""Chat websocket load: C concurrent chats, M turns each, through Daphne, against the scripted model at a fixed rate.

What it measures, per concurrency C (one row each, and a baseline row with the same model read directly):

- turns completed / expected; errors by kind (`error` frame codes, `busy` / `overloaded` refusals, timeouts);
  sockets closed abnormally (close codes other than 1000/1001, connect failures, handshake timeouts); lost and
  duplicated frames (seq gaps and repeats per conversation, as the page sees them after its `catch_up`);
- TTFT p50/p95 (user_message sent -> first delta), the model's own TTFT p50/p95 (baseline: the same scripted server
  streaming at the same concurrency, read by llm.http1's reader without parsing: the openai SDK's stock client ran
  out of the bench's core at C = 200), overhead p95 (platform p95 - model p95), turn time p50/p95
  (sent -> done), turns/s;
- CPU of each Daphne process and of redis-server (% of one core over the turn phase, from /proc/<pid>/stat), of the
  model server, of this client (to see whether the bench itself saturates) and of the whole machine (`host%`, up to
  100 x cores: other work on the machine shows there), and database statements per turn and per connect (counted
  inside Daphne by bench/load_asgi.py, read from its /_bench/stats). The JSON rows add connect and echo times
  (user_message sent -> its stored echo) and per-tenant TTFT.

How: the bench starts `--daphne N` Daphne processes (bench.load_asgi:application, production settings, a dedicated
PostgreSQL database `agentplat_bench` created and migrated if missing, Redis db 14 with a fresh key prefix per run),
the scripted model server (llm.fake_server), logs N users in through the site's login form (2 tenants), creates one
conversation per chat, and opens the chats round-robin over the Daphne ports, spread over `--ramp` seconds (all at
once with `--connect-storm`). Each chat does what the page does: open, read `hello`, `catch_up` from 0, then send a
`user_message` and read frames until `done` (or `error`), M times. Environment variables such as CHAT_MAX_TURNS or
DATABASE_POOL_MAX_SIZE are passed to Daphne, so settings can be compared run against run.

    .venv/bin/python bench/load_ws.py                                   # C = 1,10,50,100,200,500, 3 turns, 1 Daphne
    .venv/bin/python bench/load_ws.py --concurrency 1,10 --turns 2
    .venv/bin/python bench/load_ws.py --concurrency 50,100 --daphne 2  # chats spread over 2 Daphne processes
    CHAT_MAX_TURNS=50 .venv/bin/python bench/load_ws.py --concurrency 100 --json /tmp/max50.json
    .venv/bin/python bench/load_ws.py --mode ceiling --concurrency 10,50,100  # zero-delay 20-token replies: turns/s
    .venv/bin/python bench/load_ws.py --mode idle --sockets 1000 --hold 60   # memory per idle socket (goal 100 KB)
    .venv/bin/python bench/load_ws.py --ports 8001,8002 --database-url postgres://...  # servers already running

With `--ports`, the servers must use the same database (their model provider is set up by the bench); statement
counts and CPU are reported only when they serve bench.load_asgi:application on this machine.

Needs: `make install`; PostgreSQL at --database-url (default postgres://agentplat@127.0.0.1:5432/agentplat_bench:
the role needs CREATEDB; a missing role on this machine is created through the `postgres` superuser when that logs
in without a password, otherwise the bench says how to create it); Redis at --redis-url (default db 14 on
127.0.0.1:6379). No data files. Each missing one stops the bench at once with what to do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BASE_DIR, bench_parser, ensure_postgres, require_redis, setup_django, smoke_check

HOST = "127.0.0.1"
DEFAULT_DATABASE_URL = "postgres://agentplat@127.0.0.1:5432/agentplat_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
# Signs sessions and derives the provider-key cipher; a fixed value so the bench database stays usable across runs.
DEFAULT_SECRET_KEY = "bench-load-ws-not-a-secret-0123456789-abcdefghijklmnopqrstuvwxyz"  # noqa: S105
PASSWORD = "bench-load-ws-password"  # noqa: S105 (bench users on a bench database)
TENANT_SLUGS = ("load-ws-a", "load-ws-b")
AGENT_NAME = "Load bench agent"
MODEL = "gpt-4"
SYSTEM_PROMPT = "You answer briefly."
LOGIN_CONCURRENCY = 8
NORMAL_CLOSES = (1000, 1001)
WARM_UP = "warm-up"
CLIENT_SATURATED_PCT = 85.0


def log(message: str) -> None:
    """A progress line (stderr: stdout carries only the table)."""
    print(message, file=sys.stderr, flush=True)


# --- processes and /proc ---------------------------------------------------------------------------------------------


def cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a process, in seconds (None when it cannot be read)."""
    if not pid:
        return None
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int | None) -> int | None:
    """Resident memory of a process (VmRSS, KB)."""
    if not pid:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def host_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, summed over its cores (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])
    return total - idle, total


class CpuWindow:
    """CPU use of some processes between start() and stop(), as % of one core; "host": the whole machine's busy
    time as % of one core (at most 100 x cores: what else ran on the machine shows here)."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = pids
        self.started: dict[str, float | None] = {}
        self.wall = 0.0

    def start(self) -> None:
        self.wall = time.monotonic()
        self.started = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.host = host_cpu()

    def stop(self) -> dict[str, float | None]:
        elapsed = max(time.monotonic() - self.wall, 1e-9)
        result: dict[str, float | None] = {}
        for name, pid in self.pids.items():
            before, after = self.started.get(name), cpu_seconds(pid)
            result[name] = None if before is None or after is None else 100.0 * (after - before) / elapsed
        busy, total = host_cpu()
        cores = os.cpu_count() or 1
        result["host"] = 100.0 * cores * (busy - self.host[0]) / max(total - self.host[1], 1)
        return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def raise_open_files_limit() -> int:
    """Raise the soft limit of open files to the hard limit (the children inherit it); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass
class Server:
    """One Daphne process: started by the bench (process set) or already running (--ports)."""

    port: int
    process: subprocess.Popen | None = None
    pid: int | None = None
    log_path: Path | None = None
    log_offset: int = 0
    has_stats: bool = False

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def new_log_lines(self) -> list[str]:
        """Lines the process logged since the last call."""
        if self.log_path is None:
            return []
        with self.log_path.open("rb") as file:
            file.seek(self.log_offset)
            data = file.read()
        self.log_offset += len(data)
        return data.decode("utf-8", "replace").splitlines()


def start_daphne(count: int, env: dict[str, str], log_dir: Path) -> list[Server]:
    """Start `count` Daphne processes serving bench.load_asgi:application on free 127.0.0.1 ports."""
    from config.serving import DAPHNE_OPTIONS  # the repository is on the path once setup_django has run

    servers = []
    for number in range(count):
        port = free_port()
        log_path = log_dir / f"daphne-{number + 1}-{port}.log"
        with log_path.open("wb") as output:
            process = subprocess.Popen(  # noqa: S603 (the venv's daphne, fixed arguments)
                [
                    str(BASE_DIR / ".venv" / "bin" / "daphne"),
                    *DAPHNE_OPTIONS,
                    "-b",
                    HOST,
                    "-p",
                    str(port),
                    "bench.load_asgi:application",
                ],
                cwd=BASE_DIR,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        servers.append(Server(port=port, process=process, pid=process.pid, log_path=log_path))
    return servers


def stop_daphne(servers: Iterable[Server]) -> None:
    for server in servers:
        if server.process is not None and server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
    for server in servers:
        if server.process is None:
            continue
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=5)


async def wait_ready(servers: list[Server], timeout: float = 60.0) -> None:
    """Wait until every server answers HTTP; note which serve /_bench/stats (and their pid)."""
    import httpx

    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
        for server in servers:
            while True:
                if server.process is not None and server.process.poll() is not None:
                    tail = "\n".join(server.new_log_lines()[-20:])
                    raise RuntimeError(f"Daphne on port {server.port} exited:\n{tail}")
                try:
                    response = await client.get(f"{server.base}/_bench/stats")
                    if response.status_code == 200 and "queries" in response.text:
                        server.has_stats = True
                        server.pid = response.json()["pid"]
                        break
                    if response.status_code < 500:
                        break  # a server without the stats endpoint (--ports)
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Daphne on port {server.port} did not answer within {timeout:.0f} s")
                await asyncio.sleep(0.2)


async def read_stats(servers: list[Server], collect: bool = False) -> list[dict[str, Any] | None]:
    import httpx

    results: list[dict[str, Any] | None] = []
    async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
        for server in servers:
            if not server.has_stats:
                results.append(None)
                continue
            try:
                response = await client.get(f"{server.base}/_bench/stats", params={"gc": "1"} if collect else None)
                results.append(response.json())
            except (httpx.HTTPError, ValueError):
                results.append(None)
    return results


def total_queries(stats: list[dict[str, Any] | None]) -> int | None:
    if not stats or any(entry is None for entry in stats):
        return None
    return sum(entry["queries"] for entry in stats)


def redis_pid(redis_url: str) -> int | None:
    """redis-server's pid (INFO server process_id), when it runs on this machine."""
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        pid = int(client.info("server")["process_id"])
    except (redis.RedisError, KeyError, ValueError):
        return None
    finally:
        client.close()
    return pid if Path(f"/proc/{pid}/stat").exists() else None


def delete_redis_keys(redis_url: str, prefixes: Iterable[str]) -> None:
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    try:
        for prefix in prefixes:
            batch = []
            for key in client.scan_iter(f"{prefix}*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    client.delete(*batch)
                    batch = []
            if batch:
                client.delete(*batch)
    except redis.RedisError as exc:
        log(f"could not delete the run's Redis keys: {exc}")
    finally:
        client.close()


# --- database and fixtures (the bench process's own Django) ---------------------------------------------------------


@dataclass
class Account:
    """A bench user: member of one of the two bench tenants."""

    username: str
    tenant_slug: str
    cookie: str = ""  # the Cookie header of its logged-in session


def ensure_fixtures(users: int, model_base_url: str, provider_timeout: float) -> list[Account]:
    """Two tenants (budget far above the run), each with a provider on the scripted server, a published chat agent,
    and `users` members split between them; returns the accounts."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.db import transaction

    from agents.models import Agent
    from agents.services import agent_create, agent_publish
    from llm.models import ModelProvider
    from tenants.models import Membership, Role, Tenant
    from tenants.scope import tenant_scope

    for number, slug in enumerate(TENANT_SLUGS):
        tenant, _ = Tenant.objects.update_or_create(
            slug=slug,
            defaults={"name": f"Load bench {'AB'[number]}", "active": True, "monthly_token_budget": 10**15},
        )
        with tenant_scope(tenant), transaction.atomic():
            ModelProvider.objects.filter(tenant=tenant, is_default=True).exclude(name="load-bench").update(
                is_default=False
            )
            ModelProvider.objects.update_or_create(
                tenant=tenant,
                name="load-bench",
                defaults={
                    "base_url": model_base_url,
                    "chat_models": [{"name": MODEL, "context_window": 8192}],
                    "default_chat_model": MODEL,
                    "timeout_seconds": provider_timeout,
                    "max_retries": 0,
                    "is_default": True,
                },
            )
            agent = Agent.objects.filter(tenant=tenant, name=AGENT_NAME).first()
            if agent is None:
                agent = agent_create(tenant=tenant, name=AGENT_NAME, system_prompt=SYSTEM_PROMPT, model=MODEL)
            if agent.published_version() is None:
                agent_publish(agent=agent, user=None)

    User = get_user_model()
    accounts = [Account(f"load-ws-{n:04d}", TENANT_SLUGS[n % 2]) for n in range(users)]
    existing = set(User.objects.filter(username__in=[a.username for a in accounts]).values_list("username", flat=True))
    missing = [a for a in accounts if a.username not in existing]
    if missing:
        encoded = make_password(PASSWORD)  # one hash for all: hashing is the slow part of making users
        User.objects.bulk_create([User(username=a.username, password=encoded) for a in missing])
    tenants = {t.slug: t for t in Tenant.objects.filter(slug__in=TENANT_SLUGS)}
    user_ids = dict(User.objects.filter(username__in=[a.username for a in accounts]).values_list("username", "pk"))
    for account in accounts:
        Membership.objects.get_or_create(
            user_id=user_ids[account.username], tenant=tenants[account.tenant_slug], defaults={"role": Role.MEMBER}
        )
    return accounts


def create_conversations(accounts: list[Account], count: int, label: str) -> list[int]:
    """`count` new conversations with the tenant's bench agent, owner accounts[i % len(accounts)]."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from agents.models import Agent
    from agents.services import conversation_start
    from tenants.models import Tenant
    from tenants.scope import tenant_scope

    users = {u.username: u for u in get_user_model().objects.filter(username__in=[a.username for a in accounts])}
    ids = []
    for slug in TENANT_SLUGS:
        tenant = Tenant.objects.get(slug=slug)
        with tenant_scope(tenant), transaction.atomic():
            agent = Agent.objects.get(tenant=tenant, name=AGENT_NAME)
            for number in range(count):
                account = accounts[number % len(accounts)]
                if account.tenant_slug == slug:
                    conversation = conversation_start(
                        agent=agent, user=users[account.username], title=f"{label} #{number + 1}"
                    )
                    ids.append((number, conversation.pk))
    return [pk for _number, pk in sorted(ids)]


# --- HTTP login through the site -------------------------------------------------------------------------------------


def _set_cookies(response: Any) -> dict[str, str]:
    cookies: dict[str, str] = {}
    for header in response.headers.get_list("set-cookie"):
        parsed = SimpleCookie()
        parsed.load(header)
        cookies.update({name: morsel.value for name, morsel in parsed.items()})
    return cookies


async def login(client: Any, server: Server, account: Account, session_cookie_name: str, csrf_cookie_name: str) -> str:
    """Log in through the login form (CSRF cookie and token), then open the home page, which makes the session's
    active tenant the user's one (tenants.middleware); returns the Cookie header of the session."""
    url = f"{server.base}/accounts/login/"
    headers = {"Accept-Language": "en"}
    page = await client.get(url, headers=headers)
    csrf_cookie = _set_cookies(page).get(csrf_cookie_name, "")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    if page.status_code != 200 or not csrf_cookie or token is None:
        raise RuntimeError(f"login page of {server.base}: HTTP {page.status_code}, no CSRF cookie or token")
    answer = await client.post(
        url,
        data={"username": account.username, "password": PASSWORD, "csrfmiddlewaretoken": token.group(1), "next": ""},
        headers={**headers, "Origin": server.base, "Referer": url, "Cookie": f"{csrf_cookie_name}={csrf_cookie}"},
    )
    session = _set_cookies(answer).get(session_cookie_name)
    if answer.status_code != 302 or not session:
        raise RuntimeError(f"login of {account.username} on {server.base} failed: HTTP {answer.status_code}")
    cookie = f"{session_cookie_name}={session}"
    home = await client.get(f"{server.base}/", headers={**headers, "Cookie": cookie})
    if home.status_code != 200:
        raise RuntimeError(f"home page after login of {account.username}: HTTP {home.status_code}")
    return cookie


async def login_all(accounts: list[Account], servers: list[Server]) -> None:
    import httpx
    from django.conf import settings

    semaphore = asyncio.Semaphore(LOGIN_CONCURRENCY)

    async def one(number: int, account: Account) -> None:
        async with semaphore, httpx.AsyncClient(timeout=60, trust_env=False) as client:
            account.cookie = await login(
                client, servers[number % len(servers)], account, settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME
            )

    await asyncio.gather(*(one(n, a) for n, a in enumerate(accounts)))


# --- measurements -----------------------------------------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


@dataclass
class Outcome:
    """What a set of chats (or of direct model clients) measured."""

    expected: int = 0
    completed: int = 0
    errors: Counter = field(default_factory=Counter)
    closes: Counter = field(default_factory=Counter)
    lost: int = 0
    duplicated: int = 0
    gaps: int = 0  # `gap` frames (the log no longer had what catch_up asked for)
    ttft: list[float] = field(default_factory=list)
    turn: list[float] = field(default_factory=list)
    connect: list[float] = field(default_factory=list)
    echo: list[float] = field(default_factory=list)  # user_message sent -> its stored echo
    first_send: float | None = None
    last_end: float | None = None
    connected: int = 0
    by_tenant: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # tenant -> ttft / turn times

    def tenant(self, slug: str) -> dict[str, list[float]]:
        return self.by_tenant.setdefault(slug, {"ttft": [], "turn": []})

    def sent(self, at: float) -> None:
        self.first_send = at if self.first_send is None else min(self.first_send, at)

    def ended(self, at: float) -> None:
        self.last_end = at if self.last_end is None else max(self.last_end, at)

    @property
    def turns_per_second(self) -> float | None:
        if not self.completed or self.first_send is None or self.last_end is None:
            return None
        return self.completed / max(self.last_end - self.first_send, 1e-9)


class ChatClient:
    """One browser tab of a conversation: the socket, its seq bookkeeping, its turns."""

    def __init__(self, conversation_id: int, server: Server, account: Account, outcome: Outcome) -> None:
        self.conversation_id = conversation_id
        self.server = server
        self.account = account
        self.outcome = outcome
        self.ws: Any = None
        self.last_seq = 0

    async def open(self, timeout: float) -> bool:
        """Connect, read hello and catch up from 0, as the page does; False (counted) when that fails."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

        started = time.perf_counter()
        try:
            self.ws = await connect(
                f"ws://{HOST}:{self.server.port}/ws/chat/{self.conversation_id}/",
                origin=self.server.base,
                additional_headers={"Cookie": self.account.cookie, "Accept-Language": "en"},
                open_timeout=timeout,
                ping_interval=None,  # a browser answers the server's pings but sends none
                proxy=None,
                close_timeout=5,
                max_size=2**22,
            )
            async with asyncio.timeout(timeout):
                hello = json.loads(await self.ws.recv())
        except InvalidStatus as exc:
            self.outcome.closes[f"handshake {exc.response.status_code}"] += 1
            return False
        except TimeoutError:
            self.outcome.closes["handshake timeout"] += 1
            await self._abort()
            return False
        except ConnectionClosed as exc:
            self.outcome.closes[f"close {exc.rcvd.code if exc.rcvd else 1006}"] += 1
            return False
        except (OSError, InvalidHandshake) as exc:
            self.outcome.closes[f"connect {type(exc).__name__}"] += 1
            await self._abort()
            return False
        if hello.get("type") != "hello" or hello.get("conversation_id") != self.conversation_id:
            self.outcome.errors["bad hello"] += 1
            await self._abort()
            return False
        await self.ws.send(json.dumps({"type": "catch_up", "after_seq": 0}))
        self.outcome.connect.append(time.perf_counter() - started)
        self.outcome.connected += 1
        return True

    async def _abort(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()

    def observe(self, frame: dict[str, Any]) -> None:
        """Seq bookkeeping: every seq once, in order."""
        seq = frame.get("seq")
        if seq is None:
            if frame.get("type") == "gap":
                self.outcome.gaps += 1
            return
        if seq <= self.last_seq:
            self.outcome.duplicated += 1
            return
        if seq > self.last_seq + 1:
            self.outcome.lost += seq - self.last_seq - 1
        self.last_seq = seq

    async def turn(self, number: int, turn_timeout: float, deadline: float, content: str = "") -> bool:
        """Send one message and read its frames to `done` or `error`; False when the chat cannot go on."""
        from websockets.exceptions import ConnectionClosed

        client_id = str(uuid.uuid4())
        content = content or f"Tell me about solar panels ({number})."
        message = {"type": "user_message", "client_id": client_id, "content": content}
        sent = time.perf_counter()
        limit = min(sent + turn_timeout, deadline)
        first_delta = None
        try:
            await self.ws.send(json.dumps(message))
            self.outcome.sent(sent)
            while True:
                remaining = limit - time.perf_counter()
                if remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    frame = json.loads(await self.ws.recv())
                now = time.perf_counter()
                self.observe(frame)
                kind = frame.get("type")
                if frame.get("seq") is None:
                    if kind == "error" and frame.get("client_id") == client_id:
                        self.outcome.errors[f"refused {frame.get('code')}"] += 1
                        return True
                    continue
                if kind == "user_message" and frame.get("client_id") == client_id:
                    self.outcome.echo.append(now - sent)
                elif kind == "delta" and first_delta is None and frame.get("index", 0) == 0:
                    first_delta = now
                    self.outcome.ttft.append(now - sent)
                    self.outcome.tenant(self.account.tenant_slug)["ttft"].append(now - sent)
                elif kind == "done" and frame.get("index", 0) == 0:
                    if frame.get("status") == "complete":
                        self.outcome.completed += 1
                        self.outcome.tenant(self.account.tenant_slug)["turn"].append(now - sent)
                        self.outcome.turn.append(now - sent)
                        self.outcome.ended(now)
                        return True
                    self.outcome.errors["partial"] += 1  # an error frame follows
                elif kind == "error" and frame.get("index", 0) == 0:
                    self.outcome.errors[f"error {frame.get('code')}"] += 1
                    self.outcome.ended(now)
                    return True
        except TimeoutError:
            self.outcome.errors["timeout"] += 1
            return False
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else 1006
            self.outcome.closes[f"close {code}"] += 1
            self.ws = None
            return False

    async def close(self) -> None:
        """Close normally; a close the server started before ours with another code is counted."""
        if self.ws is None:
            return
        protocol = self.ws.protocol
        received = protocol.close_rcvd
        server_first = received is not None and (protocol.close_sent is None or protocol.close_rcvd_then_sent)
        if server_first and received.code not in NORMAL_CLOSES:
            self.outcome.closes[f"close {received.code}"] += 1
        with contextlib.suppress(Exception):
            await self.ws.close()
        self.ws = None


def ramp_offsets(count: int, ramp: float) -> list[float]:
    return [ramp * n / count for n in range(count)] if count and ramp > 0 else [0.0] * count


@dataclass
class Level:
    """One row of the table: a run of the platform or of the model alone at one concurrency."""

    mode: str
    run: str  # "platform" or "model"
    concurrency: int
    turns_expected: int
    turns_completed: int
    errors: dict[str, int]
    closes: dict[str, int]
    lost: int | None
    duplicated: int | None
    gap_frames: int | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    model_ttft_p50_ms: float | None
    model_ttft_p95_ms: float | None
    overhead_p95_ms: float | None
    turn_p50_s: float | None
    turn_p95_s: float | None
    turns_per_second: float | None
    connect_p95_ms: float | None
    echo_p50_ms: float | None
    echo_p95_ms: float | None
    daphne_cpu_pct: list[float | None]
    redis_cpu_pct: float | None
    model_cpu_pct: float | None
    client_cpu_pct: float | None
    host_cpu_pct: float | None
    queries_per_turn: float | None
    queries_per_connect: float | None
    elapsed_s: float
    daphne_log: dict[str, int]
    by_tenant: dict[str, dict[str, float | int | None]]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def _s(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def run_platform(
    args: argparse.Namespace,
    concurrency: int,
    turns: int,
    conversation_ids: list[int],
    accounts: list[Account],
    servers: list[Server],
    pids: dict[str, int | None],
) -> tuple[Outcome, dict[str, Any]]:
    """C chats over the servers: connect phase (ramped), then M turns each (same ramp); bounded by the deadline."""
    outcome = Outcome(expected=concurrency * turns)
    ramp = 0.0 if args.connect_storm else args.ramp if args.ramp is not None else min(5.0, 0.02 * concurrency)
    offsets = ramp_offsets(concurrency, ramp)
    clients = [
        ChatClient(conversation_id, servers[n % len(servers)], accounts[n % len(accounts)], outcome)
        for n, conversation_id in enumerate(conversation_ids)
    ]
    started = time.monotonic()
    deadline_clock = time.perf_counter() + args.deadline
    queries_before = total_queries(await read_stats(servers))
    go = asyncio.Event()

    async def connect(n: int, client: ChatClient) -> bool:
        await asyncio.sleep(offsets[n])
        return await client.open(args.connect_timeout)

    async def chat(n: int, client: ChatClient) -> None:
        await go.wait()
        await asyncio.sleep(offsets[n])
        for number in range(turns):
            if time.perf_counter() >= deadline_clock:
                outcome.errors["deadline"] += turns - number
                break
            if not await client.turn(number + 1, args.turn_timeout, deadline_clock):
                break
        await client.close()

    opened = await asyncio.gather(*(connect(n, c) for n, c in enumerate(clients)))
    log(
        f"  C={concurrency}: {sum(opened)}/{concurrency} sockets open in {time.monotonic() - started:.1f} s "
        f"(ramp {ramp:.1f} s)"
    )
    queries_connected = total_queries(await read_stats(servers))
    window = CpuWindow(pids)
    window.start()
    tasks = [asyncio.create_task(chat(n, c)) for n, c in enumerate(clients) if opened[n]]
    go.set()
    progress = asyncio.create_task(_progress(concurrency, outcome))
    try:
        if tasks:
            await asyncio.wait(tasks, timeout=max(1.0, deadline_clock - time.perf_counter()) + args.turn_timeout + 10)
    finally:
        progress.cancel()
        for task in tasks:
            if not task.done():
                task.cancel()
                outcome.errors["deadline"] += 1
        await asyncio.gather(*tasks, return_exceptions=True)
    cpu = window.stop()
    await asyncio.sleep(0.5)  # let the servers finish their side of the closes before counting statements
    queries_after = total_queries(await read_stats(servers))
    extra = {
        "cpu": cpu,
        "elapsed": time.monotonic() - started,
        "queries_per_connect": (queries_connected - queries_before) / outcome.connected
        if queries_before is not None and queries_connected is not None and outcome.connected
        else None,
        "queries_per_turn": (queries_after - queries_connected) / outcome.completed
        if queries_after is not None and queries_connected is not None and outcome.completed
        else None,
    }
    return outcome, extra


async def _progress(concurrency: int, outcome: Outcome, every: float = 10.0) -> None:
    started = time.monotonic()
    while True:
        await asyncio.sleep(every)
        errors = sum(outcome.errors.values()) + sum(outcome.closes.values())
        log(
            f"  C={concurrency}: {time.monotonic() - started:.0f} s, turns {outcome.completed}/{outcome.expected}, "
            f"errors {errors}"
        )


# The first chunk that carries text, in the scripted server's JSON (any separators).
FIRST_TEXT = re.compile(rb'"content": ?"[^"]')


async def run_model(
    args: argparse.Namespace, concurrency: int, turns: int, base_url: str, pids: dict[str, int | None]
) -> tuple[Outcome, dict[str, Any]]:
    """The baseline: the same scripted model read directly, C concurrent streams x M turns, by the cheapest client
    here (llm.http1's reader, the body's bytes searched for the first text): the openai SDK's stock client spent
    about 0.75 ms of CPU a chunk, so at C = 200 the bench's one core ran out and the "model's" TTFT was the client's."""
    import httpcore2  # the repository is on the path once setup_django has run

    from llm.http1 import HTTP1Pool, Origin, Timeouts

    outcome = Outcome(expected=concurrency * turns)
    ramp = 0.0 if args.connect_storm else args.ramp if args.ramp is not None else min(5.0, 0.02 * concurrency)
    offsets = ramp_offsets(concurrency, ramp)
    pool = HTTP1Pool()
    port = int(base_url.rsplit(":", 1)[1].split("/")[0])
    origin = Origin("http", HOST, port, HOST)
    headers = [("Content-Type", "application/json"), ("Authorization", "Bearer bench")]
    timeouts = Timeouts(connect=10.0, read=args.turn_timeout, write=10.0)
    deadline_clock = time.perf_counter() + args.deadline

    async def one_turn(number: int) -> None:
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Tell me about solar panels ({number})."},
        ]
        body = {"model": MODEL, "messages": messages, "stream": True, "stream_options": {"include_usage": True}}
        sent = time.perf_counter()
        outcome.sent(sent)
        first = None
        async with asyncio.timeout(max(0.1, min(sent + args.turn_timeout, deadline_clock) - sent)):
            reply = await pool.post(origin, b"/v1/chat/completions", headers, json.dumps(body).encode(), timeouts)
            if reply.status != 200:
                await reply.aclose()
                raise httpcore2.RemoteProtocolError(f"HTTP {reply.status}")
            async for part in reply.body():
                if first is None and FIRST_TEXT.search(part):
                    first = time.perf_counter()
                    outcome.ttft.append(first - sent)
        now = time.perf_counter()
        outcome.completed += 1
        outcome.turn.append(now - sent)
        outcome.ended(now)

    async def chat(n: int) -> None:
        await asyncio.sleep(offsets[n])
        for number in range(turns):
            if time.perf_counter() >= deadline_clock:
                outcome.errors["deadline"] += turns - number
                return
            try:
                await one_turn(number + 1)
            except TimeoutError:
                outcome.errors["timeout"] += 1
                return
            except (httpcore2.NetworkError, httpcore2.ProtocolError) as exc:
                outcome.errors[f"error {type(exc).__name__}"] += 1
                return

    window = CpuWindow(pids)
    started = time.monotonic()
    window.start()
    await asyncio.gather(*(chat(n) for n in range(concurrency)))
    return outcome, {"cpu": window.stop(), "elapsed": time.monotonic() - started}


def daphne_log_counts(servers: list[Server]) -> dict[str, int]:
    counts: Counter = Counter()
    for server in servers:
        for line in server.new_log_lines():
            for word in ("CRITICAL", "ERROR", "WARNING", "Traceback"):
                if word in line:
                    counts[word] += 1
    return dict(counts)


def make_level(
    mode: str,
    run: str,
    concurrency: int,
    outcome: Outcome,
    extra: dict[str, Any],
    servers: list[Server],
    model: Outcome | None = None,
    daphne_log: dict[str, int] | None = None,
) -> Level:
    cpu = extra["cpu"]
    platform = run == "platform"
    ttft95 = percentile(outcome.ttft, 95)
    model95 = percentile(model.ttft, 95) if model is not None else None
    return Level(
        mode=mode,
        run=run,
        concurrency=concurrency,
        turns_expected=outcome.expected,
        turns_completed=outcome.completed,
        errors=dict(outcome.errors),
        closes=dict(outcome.closes),
        lost=outcome.lost if platform else None,
        duplicated=outcome.duplicated if platform else None,
        gap_frames=outcome.gaps if platform else None,
        ttft_p50_ms=_ms(percentile(outcome.ttft, 50)),
        ttft_p95_ms=_ms(ttft95),
        model_ttft_p50_ms=_ms(percentile(model.ttft, 50)) if model is not None else None,
        model_ttft_p95_ms=_ms(model95),
        overhead_p95_ms=_ms(ttft95 - model95) if ttft95 is not None and model95 is not None else None,
        turn_p50_s=_s(percentile(outcome.turn, 50)),
        turn_p95_s=_s(percentile(outcome.turn, 95)),
        turns_per_second=_s(outcome.turns_per_second),
        connect_p95_ms=_ms(percentile(outcome.connect, 95)) if platform else None,
        echo_p50_ms=_ms(percentile(outcome.echo, 50)) if platform else None,
        echo_p95_ms=_ms(percentile(outcome.echo, 95)) if platform else None,
        daphne_cpu_pct=[_round(cpu.get(f"daphne {s.port}")) for s in servers],
        redis_cpu_pct=_round(cpu.get("redis")),
        model_cpu_pct=_round(cpu.get("model")),
        client_cpu_pct=_round(cpu.get("client")),
        host_cpu_pct=_round(cpu.get("host")),
        queries_per_turn=_round(extra.get("queries_per_turn")),
        queries_per_connect=_round(extra.get("queries_per_connect")),
        elapsed_s=round(extra["elapsed"], 1),
        daphne_log=daphne_log or {},
        by_tenant={
            slug: {
                "turns_completed": len(times["turn"]),
                "ttft_p50_ms": _ms(percentile(times["ttft"], 50)),
                "ttft_p95_ms": _ms(percentile(times["ttft"], 95)),
                "turn_p95_s": _s(percentile(times["turn"], 95)),
            }
            for slug, times in sorted(outcome.by_tenant.items())
        },
    )


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


# --- the table --------------------------------------------------------------------------------------------------------

COLUMNS = (
    ("C", 5),
    ("run", 8),
    ("turns", 11),
    ("TTFT p50/p95 ms", 17),
    ("model TTFT p50/p95", 19),
    ("ovh p95", 8),
    ("turn p50/p95 s", 15),
    ("turns/s", 8),
    ("Daphne CPU%", 12),
    ("CPU ms/turn", 12),
    ("Redis%", 7),
    ("model%", 7),
    ("client%", 8),
    ("host%", 6),
    ("q/turn", 7),
    ("q/conn", 7),
    ("lost/dup", 9),
)


def _fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def _pair(a: float | None, b: float | None, spec: str = ".0f") -> str:
    return f"{_fmt(a, spec)}/{_fmt(b, spec)}"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} x{n}" for name, n in sorted(counts.items())) or "-"


def cpu_ms_per_turn(level: Level) -> float | None:
    """Milliseconds of Daphne CPU (all processes) per completed turn over the turn phase (connects are in it too)."""
    cpu = [value for value in level.daphne_cpu_pct if value is not None] if level.daphne_cpu_pct else []
    if not cpu or not level.turns_per_second:
        return None
    return sum(cpu) / 100 / level.turns_per_second * 1000


def table_header() -> str:
    head = " ".join(name.rjust(width) for name, width in COLUMNS)
    return f"{head}  abnormal closes | errors"


def table_row(level: Level) -> str:
    cells = [
        str(level.concurrency),
        level.run,
        f"{level.turns_completed}/{level.turns_expected}",
        _pair(level.ttft_p50_ms, level.ttft_p95_ms),
        _pair(level.model_ttft_p50_ms, level.model_ttft_p95_ms),
        _fmt(level.overhead_p95_ms, "+.0f"),
        _pair(level.turn_p50_s, level.turn_p95_s, ".2f"),
        _fmt(level.turns_per_second, ".1f"),
        "/".join(_fmt(v) for v in level.daphne_cpu_pct) if level.daphne_cpu_pct else "-",
        _fmt(cpu_ms_per_turn(level), ".1f"),
        _fmt(level.redis_cpu_pct),
        _fmt(level.model_cpu_pct),
        _fmt(level.client_cpu_pct),
        _fmt(level.host_cpu_pct),
        _fmt(level.queries_per_turn, ".1f"),
        _fmt(level.queries_per_connect, ".1f"),
        "-" if level.lost is None else f"{level.lost}/{level.duplicated}",
    ]
    line = " ".join(cell.rjust(width) for cell, (_name, width) in zip(cells, COLUMNS, strict=True))
    return f"{line}  {_counts(level.closes)} | {_counts(level.errors)}"


# --- modes ------------------------------------------------------------------------------------------------------------


@dataclass
class Context:
    args: argparse.Namespace
    servers: list[Server]
    accounts: list[Account]
    model_base_url: str
    pids: dict[str, int | None]


async def prepare(context: Context) -> None:
    await wait_ready(context.servers)
    started = time.monotonic()
    await login_all(context.accounts, context.servers)
    log(f"logged {len(context.accounts)} users in through the login form in {time.monotonic() - started:.1f} s")
    await warm_up(context)


async def warm_up(context: Context) -> None:
    """One short turn per Daphne process and one direct model call, not measured: the first ones pay for imports,
    caches and connection set-up."""
    import httpx
    import openai

    servers = context.servers
    ids = await asyncio.to_thread(create_conversations, context.accounts, len(servers), "load warm-up")
    outcome = Outcome()
    for n, conversation_id in enumerate(ids):
        client = ChatClient(conversation_id, servers[n], context.accounts[n % len(context.accounts)], outcome)
        if await client.open(context.args.connect_timeout):
            await client.turn(1, context.args.turn_timeout, time.perf_counter() + 60, content=WARM_UP)
            await client.close()
    async with httpx.AsyncClient(trust_env=False) as http_client:
        client = openai.AsyncOpenAI(api_key="bench", base_url=context.model_base_url, http_client=http_client)
        messages = [{"role": "user", "content": WARM_UP}]
        async for _chunk in await client.chat.completions.create(model=MODEL, messages=messages, stream=True):
            pass
    if outcome.completed != len(servers):
        problems = {**outcome.errors, **outcome.closes}
        log(f"warm-up turns: {outcome.completed}/{len(servers)} completed, {problems}")


async def mode_turns(context: Context, concurrency: int, turns: int) -> list[Level]:
    args = context.args
    mode = args.mode
    conversation_ids = await asyncio.to_thread(
        create_conversations, context.accounts, concurrency, f"load {mode} C={concurrency}"
    )
    log(f"C={concurrency}: baseline, the model alone ({concurrency} streams x {turns} turns)")
    model_pids = {"model": context.pids["model"], "client": context.pids["client"]}
    model, model_extra = await run_model(args, concurrency, turns, context.model_base_url, model_pids)
    log(f"C={concurrency}: platform, {concurrency} chats x {turns} turns")
    daphne_log_counts(context.servers)  # skip what was logged before this level
    platform, platform_extra = await run_platform(
        args, concurrency, turns, conversation_ids, context.accounts, context.servers, context.pids
    )
    logged = daphne_log_counts(context.servers)
    if logged:
        log(f"  C={concurrency}: Daphne logged {logged}")
    levels = [
        make_level(mode, "platform", concurrency, platform, platform_extra, context.servers, model, logged),
        make_level(mode, "model", concurrency, model, model_extra, context.servers),
    ]
    for level in levels:
        if (level.client_cpu_pct or 0) > CLIENT_SATURATED_PCT:
            log(
                f"  C={concurrency}: the bench client used {level.client_cpu_pct:.0f}% of a core in the {level.run} "
                "run: its numbers may show the client's limit, not the server's"
            )
    return levels


async def mode_idle(context: Context) -> dict[str, Any]:
    """Open --sockets chats, hold them idle, check each still answers; Daphne memory per idle socket."""
    args = context.args
    count = args.sockets
    servers = context.servers
    conversation_ids = await asyncio.to_thread(create_conversations, context.accounts, count, f"load idle n={count}")
    outcome = Outcome()
    # Warm up: the first sockets pay for lazy imports and caches, not the idle cost of a socket.
    warm_ids = await asyncio.to_thread(create_conversations, context.accounts, 4 * len(servers), "load idle warm-up")
    warm = [
        ChatClient(cid, servers[n % len(servers)], context.accounts[n % len(context.accounts)], Outcome())
        for n, cid in enumerate(warm_ids)
    ]
    for client in warm:
        if await client.open(args.connect_timeout):
            await client.close()
    await asyncio.sleep(2)
    stats_before = await read_stats(servers, collect=True)
    rss_before = [rss_kb(s.pid) for s in servers]
    clients = [
        ChatClient(cid, servers[n % len(servers)], context.accounts[n % len(context.accounts)], outcome)
        for n, cid in enumerate(conversation_ids)
    ]
    ramp = 0.0 if args.connect_storm else args.ramp if args.ramp is not None else min(10.0, 0.01 * count)
    offsets = ramp_offsets(count, ramp)
    log(f"opening {count} sockets (ramp {ramp:.1f} s)")
    started = time.monotonic()

    async def open_one(n: int, client: ChatClient) -> bool:
        await asyncio.sleep(offsets[n])
        return await client.open(args.connect_timeout)

    opened = await asyncio.gather(*(open_one(n, c) for n, c in enumerate(clients)))
    open_seconds = time.monotonic() - started
    log(f"{sum(opened)}/{count} open in {open_seconds:.1f} s; holding them idle for {args.hold:.0f} s")
    stats_open = await read_stats(servers)
    window = CpuWindow(context.pids)
    window.start()
    await asyncio.sleep(args.hold)
    cpu = window.stop()
    stats_held = await read_stats(servers, collect=True)
    rss_held = [rss_kb(s.pid) for s in servers]
    # Still open? A catch_up the consumer must answer: an invalid after_seq gets a `bad_request` error (a valid one on
    # an empty conversation has nothing to send back).
    alive = Counter()

    async def check(client: ChatClient) -> None:
        from websockets.exceptions import ConnectionClosed

        if client.ws is None:
            return
        try:
            await client.ws.send(json.dumps({"type": "catch_up", "after_seq": -1}))
            async with asyncio.timeout(args.turn_timeout):
                while True:
                    frame = json.loads(await client.ws.recv())
                    client.observe(frame)
                    if frame.get("type") == "error" and frame.get("code") == "bad_request":
                        alive["answered"] += 1
                        return
                    alive["unexpected frames"] += 1
        except TimeoutError:
            alive["no answer"] += 1
        except ConnectionClosed as exc:
            outcome.closes[f"close {exc.rcvd.code if exc.rcvd else 1006}"] += 1
            client.ws = None

    await asyncio.gather(*(check(c) for c in clients))
    await asyncio.gather(*(c.close() for c in clients))
    await asyncio.sleep(3)
    rss_closed = [rss_kb(s.pid) for s in servers]
    logged = daphne_log_counts(servers)
    grown = [a - b for a, b in zip(rss_held, rss_before, strict=True) if a is not None and b is not None]
    queries_open = total_queries(stats_open)
    queries_before = total_queries(stats_before)
    return {
        "mode": "idle",
        "sockets": count,
        "opened": outcome.connected,
        "answered_after_hold": alive["answered"],
        "no_answer": alive["no answer"],
        "unexpected_frames": alive["unexpected frames"],
        "closes": dict(outcome.closes),
        "errors": dict(outcome.errors),
        "lost": outcome.lost,
        "duplicated": outcome.duplicated,
        "open_seconds": round(open_seconds, 1),
        "connect_p50_ms": _ms(percentile(outcome.connect, 50)),
        "connect_p95_ms": _ms(percentile(outcome.connect, 95)),
        "hold_s": args.hold,
        "rss_before_kb": rss_before,
        "rss_held_kb": rss_held,
        "rss_closed_kb": rss_closed,
        "kb_per_socket": round(sum(grown) / outcome.connected, 1) if grown and outcome.connected else None,
        "queries_per_connect": round((queries_open - queries_before) / outcome.connected, 1)
        if queries_open is not None and queries_before is not None and outcome.connected
        else None,
        "daphne_threads": [s["threads"] if s else None for s in stats_held],
        "cpu_while_idle_pct": {name: _round(value) for name, value in cpu.items()},
        "daphne_log": logged,
    }


def idle_table(result: dict[str, Any]) -> str:
    def mb(values: list[int | None]) -> str:
        return "/".join("-" if v is None else f"{v / 1024:.1f}" for v in values)

    cpu = result["cpu_while_idle_pct"]
    daphne_cpu = "/".join(_fmt(v) for k, v in cpu.items() if k.startswith("daphne"))
    head = (
        f"{'sockets':>8} {'open':>6} {'alive':>6} {'open s':>7} {'conn p50/p95 ms':>16} {'RSS MB before':>14} "
        f"{'held':>10} {'closed':>10} {'KB/socket':>10} {'q/conn':>7} {'Daphne CPU%':>12} {'Redis%':>7}"
        "  abnormal closes | errors"
    )
    kb = result["kb_per_socket"]
    verdict = "" if kb is None else (" (goal <= 100: met)" if kb <= 100 else " (goal <= 100: NOT met)")
    row = (
        f"{result['sockets']:>8} {result['opened']:>6} {result['answered_after_hold']:>6} {result['open_seconds']:>7} "
        f"{_pair(result['connect_p50_ms'], result['connect_p95_ms']):>16} {mb(result['rss_before_kb']):>14} "
        f"{mb(result['rss_held_kb']):>10} {mb(result['rss_closed_kb']):>10} {_fmt(kb, '.1f'):>10} "
        f"{_fmt(result['queries_per_connect'], '.1f'):>7} {daphne_cpu or '-':>12} {_fmt(cpu.get('redis')):>7}"
        f"  {_counts(result['closes'])} | {_counts(result['errors'])}"
    )
    return f"{head}\n{row}{verdict}"


def smoke_failures(rows: list[dict[str, Any]]) -> list[str]:
    """What went wrong in a smoke run's rows (turn levels and the idle row): any turn not completed or without a first
    text, error, abnormal close, lost or duplicated frame, socket not opened or not answering, error or traceback in
    Daphne's log."""
    failures = []
    for row in rows:
        if row["mode"] == "idle":
            label = f"idle, {row['sockets']} sockets"
            if row["opened"] != row["sockets"] or row["answered_after_hold"] != row["sockets"]:
                failures.append(f"{label}: {row['opened']} opened, {row['answered_after_hold']} answered")
        else:
            label = f"C={row['concurrency']} {row['run']}"
            if row["turns_completed"] != row["turns_expected"]:
                failures.append(f"{label}: {row['turns_completed']}/{row['turns_expected']} turns completed")
            if row["lost"] or row["duplicated"]:
                failures.append(f"{label}: {row['lost']} frames lost, {row['duplicated']} duplicated")
            if row["turns_completed"] and row["ttft_p50_ms"] is None:
                failures.append(f"{label}: no first text seen in {row['turns_completed']} turns (no TTFT)")
        for kind in ("errors", "closes"):
            if row[kind]:
                failures.append(f"{label}: {kind} {_counts(row[kind])}")
        logged = {word: count for word, count in (row.get("daphne_log") or {}).items() if word != "WARNING"}
        if logged:
            failures.append(f"{label}: Daphne logged {_counts(logged)} (its log is named above)")
    return failures


# --- main -------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(
        __doc__, description=__doc__.splitlines()[0],
        smoke="C = 1,2, 2 turns of 10 tokens each, then 4 idle sockets held 1 s (load and idle modes in one run); "
        "every turn must complete and every socket stay open",
    )  # fmt: skip
    parser.add_argument("--mode", choices=("load", "ceiling", "idle"), default="load")
    parser.add_argument("--concurrency", default="1,10,50,100,200,500", help="comma-separated chat counts C")
    parser.add_argument("--turns", type=int, help="turns per chat (default 3; 10 in ceiling mode)")
    parser.add_argument("--users", type=int, help="users logged in (default: min(largest C or sockets, 50))")
    parser.add_argument("--daphne", type=int, default=1, help="Daphne processes the bench starts")
    parser.add_argument("--ports", help="use these running servers instead (comma-separated ports on 127.0.0.1)")
    parser.add_argument("--tokens", type=int, help="reply length (default 200; 20 in ceiling mode)")
    parser.add_argument("--delay", type=float, help="seconds between chunks (default 0.05; 0 in ceiling mode)")
    parser.add_argument("--turn-timeout", type=float, default=60.0, help="seconds a turn may take")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds one concurrency level may take")
    parser.add_argument("--connect-timeout", type=float, default=30.0, help="seconds for a handshake and hello")
    parser.add_argument("--ramp", type=float, help="seconds over which sockets open (default 0.02 s x C, <= 5 s)")
    parser.add_argument("--connect-storm", action="store_true", help="open every socket at once")
    parser.add_argument("--sockets", type=int, default=1000, help="idle mode: sockets to hold open")
    parser.add_argument("--hold", type=float, default=60.0, help="idle mode: seconds to hold them")
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--json", help="write the rows (and the configuration) to this file")
    args = parser.parse_args(argv)
    if args.smoke:
        args.mode, args.concurrency, args.turns, args.tokens, args.delay = "load", "1,2", 2, 10, 0.001
        args.turn_timeout, args.deadline, args.sockets, args.hold = 30.0, 60.0, 4, 1.0
    ceiling = args.mode == "ceiling"
    args.turns = args.turns or (10 if ceiling else 3)
    args.tokens = args.tokens if args.tokens is not None else (20 if ceiling else 200)
    args.delay = args.delay if args.delay is not None else (0.0 if ceiling else 0.05)
    args.levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    largest = args.sockets if args.mode == "idle" else max(args.levels)
    args.users = args.users or max(1, min(largest, 50))
    return args


def bench_environment(args: argparse.Namespace, run_id: str) -> dict[str, str]:
    """What the bench and its Daphne processes run with (exported variables pass through, these win)."""
    return {
        "DATABASE_URL": args.database_url,
        "REDIS_URL": args.redis_url,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or DEFAULT_SECRET_KEY,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECURE_COOKIES": "0",  # plain http on 127.0.0.1
        "DJANGO_STATIC_MANIFEST": "0",  # no collectstatic for a bench
        "LOG_LEVEL": "WARNING",
        "LLM_ALLOW_PRIVATE_BASE_URLS": "1",  # the scripted model server is on 127.0.0.1
        "CHAT_STREAM_PREFIX": f"bench-{run_id}",
        "CHANNELS_PREFIX": f"bench-{run_id}-asgi",
        # Each bench user sends its turns back to back: the pages' per-member rate is not what this measures.
        "CHAT_USER_MESSAGES_PER_MINUTE": os.environ.get("CHAT_USER_MESSAGES_PER_MINUTE", "0"),
    }


PASSED_THROUGH = re.compile(r"^(CHAT_|REDIS_|LLM_|DATABASE_(CONN|POOL|THREADS)|AGENT_)")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    open_files = raise_open_files_limit()
    run_id = uuid.uuid4().hex[:10]
    environment = bench_environment(args, run_id)
    exported = {k: v for k, v in os.environ.items() if PASSED_THROUGH.match(k) and k not in environment}
    require_redis(args.redis_url)
    ensure_postgres(args.database_url)
    os.environ.update(environment)
    setup_django()  # migrates the bench database

    from llm.fake_server import spawn

    script = {
        "defaults": {"delay": args.delay, "chunk_size": 0},
        "rules": [
            {"when": {"last_message": WARM_UP}, "reply": {"text_tokens": 5, "delay": 0}},
            {"when": {}, "reply": {"text_tokens": args.tokens, "delay": args.delay}},
        ],
    }
    model_process, model_port = spawn(script)
    model_base_url = f"http://{HOST}:{model_port}/v1"
    servers: list[Server] = []
    log_dir = Path(tempfile.mkdtemp(prefix="load-ws-"))
    try:
        accounts = ensure_fixtures(args.users, model_base_url, provider_timeout=max(args.turn_timeout, 30.0))
        if args.ports:
            servers = [Server(port=int(p)) for p in args.ports.split(",") if p.strip()]
        else:
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(BASE_DIR), os.environ.get("PYTHONPATH")])),
            }
            servers = start_daphne(args.daphne, env, log_dir)
        asyncio.run(run(args, servers, accounts, model_base_url, model_process.pid, exported, open_files, log_dir))
    finally:
        stop_daphne(servers)
        model_process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            model_process.wait(timeout=5)
        delete_redis_keys(args.redis_url, [environment["CHAT_STREAM_PREFIX"], environment["CHANNELS_PREFIX"]])


async def run(
    args: argparse.Namespace,
    servers: list[Server],
    accounts: list[Account],
    model_base_url: str,
    model_pid: int,
    exported: dict[str, str],
    open_files: int,
    log_dir: Path,
) -> None:
    context = Context(args, servers, accounts, model_base_url, {})
    await prepare(context)
    context.pids = {f"daphne {s.port}": s.pid for s in servers}
    context.pids.update({"redis": redis_pid(args.redis_url), "model": model_pid, "client": os.getpid()})
    stats = await read_stats(servers)
    effective = stats[0]["settings"] if stats and stats[0] else {}
    ports = ",".join(str(s.port) for s in servers)
    origin = "started by the bench" if not args.ports else "already running"
    header = (
        f"# load_ws mode={args.mode} | {len(servers)} Daphne ({origin}; ports {ports}) | "
        f"users={len(accounts)} in {len(TENANT_SLUGS)} tenants | "
        f"model {args.tokens} tokens/reply at {args.delay * 1000:g} ms/chunk | "
        + (
            f"sockets={args.sockets} hold={args.hold:g}s | "
            if args.mode == "idle"
            else f"C={args.concurrency} turns={args.turns} | "
        )
        + f"turn timeout {args.turn_timeout:g}s, deadline {args.deadline:g}s/C | "
        f"{'connect storm' if args.connect_storm else 'ramped connects'} | nofile={open_files} | "
        f"db={args.database_url} redis={args.redis_url} | settings {json.dumps(effective, sort_keys=True)}"
        + (f" | exported {json.dumps(exported, sort_keys=True)}" if exported else "")
    )
    print(header, flush=True)
    log(f"Daphne logs: {log_dir}")
    if args.mode == "idle":
        result = await mode_idle(context)
        print(idle_table(result), flush=True)
        rows: list[dict[str, Any]] = [result]
    else:
        print(table_header(), flush=True)
        rows = []
        for concurrency in args.levels:
            levels = await mode_turns(context, concurrency, args.turns)
            for level in levels:
                print(table_row(level), flush=True)
                rows.append(asdict(level))
    if args.smoke:
        result = await mode_idle(context)
        print(idle_table(result), flush=True)
        rows.append(result)
        smoke_check(smoke_failures(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"config": header, "rows": rows}, indent=2))
        log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
