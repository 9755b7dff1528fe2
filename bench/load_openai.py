"""Turns per second through the OpenAI-compatible endpoint (POST /v1/chat/completions), streamed and not, against
the scripted model at zero delay, compared with the same model called directly at the same concurrency.

Per concurrency C and mode (blocking / streaming): requests completed / expected, errors by status, turns/s, latency
p50/p95 (request -> last byte) and the model's own, the server's CPU (% of one core, summed over its processes), its
CPU milliseconds per completed turn, and the whole machine's. With `make litellm` built, a peer gateway's row at the
same level (LiteLLM's proxy on the same scripted model, bench/peer_litellm.py) and the platform's turns/s over its.
Each request is a stateless turn (a new conversation from `messages`), as most OpenAI clients send.

How: the same set-up as bench/load_ws.py (Daphne processes serving bench.load_asgi:application with production
settings, PostgreSQL database `agentplat_bench`, Redis db 14, the scripted model server); an API key is made for a
bench tenant's admin, with a rate limit far above the run.

    .venv/bin/python bench/load_openai.py                          # C = 10,50,100, 20-token replies, 1 Daphne
    .venv/bin/python bench/load_openai.py --daphne 2 --requests 400

Needs: what bench/load_ws.py needs: `make install`, PostgreSQL at --database-url (the role needs CREATEDB; a missing
one is created when this machine's `postgres` superuser can, otherwise the bench says how) and Redis at --redis-url.
No data files.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_litellm
from common import BASE_DIR, bench_parser, ensure_postgres, require_redis, setup_django, smoke_check
from load_ws import (
    DEFAULT_DATABASE_URL,
    DEFAULT_REDIS_URL,
    HOST,
    MODEL,
    TENANT_SLUGS,
    CpuWindow,
    bench_environment,
    delete_redis_keys,
    ensure_fixtures,
    free_port,
    log,
    percentile,
    start_daphne,
    stop_daphne,
    wait_ready,
)


def make_key() -> tuple[str, str]:
    """An API key of the first bench tenant (acting as a member made admin) and the agent's API name."""
    from django.contrib.auth import get_user_model

    from agents.models import Agent
    from api.keys import key_create
    from tenants.models import Membership, Role, Tenant
    from tenants.scope import tenant_scope

    tenant = Tenant.objects.get(slug=TENANT_SLUGS[0])
    user = get_user_model().objects.filter(memberships__tenant=tenant).order_by("pk").first()
    Membership.objects.filter(user=user, tenant=tenant).update(role=Role.ADMIN)
    with tenant_scope(tenant):
        agent = Agent.objects.filter(versions__isnull=False).order_by("pk").first()
        _key, secret = key_create(tenant=tenant, user=user, name=f"load bench {uuid.uuid4().hex[:6]}")
        return secret, agent.slug


async def one_request(client: Any, url: str, body: dict[str, Any], stream: bool) -> tuple[int, float, str]:
    started = time.perf_counter()
    text = ""
    if stream:
        async with client.stream("POST", url, json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    for choice in chunk.get("choices") or []:
                        text += choice.get("delta", {}).get("content") or ""
            status = response.status_code
    else:
        response = await client.post(url, json=body)
        status = response.status_code
        if status == 200:
            text = response.json()["choices"][0]["message"]["content"]
    return status, time.perf_counter() - started, text


async def run_level(
    urls: list[str], headers: dict[str, str], model: str, concurrency: int, requests: int, stream: bool
) -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    queue = list(range(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits, trust_env=False) as client:

        async def worker(number: int) -> None:
            while queue:
                n = queue.pop()
                body = {"model": model, "messages": [{"role": "user", "content": f"hello {n}"}], "stream": stream}
                try:
                    status, seconds, text = await one_request(client, urls[number % len(urls)], body, stream)
                except Exception as exc:  # counted, not raised: a bench reports failures
                    statuses[type(exc).__name__] += 1
                    continue
                if status == 200 and text:
                    latencies.append(seconds)
                else:
                    statuses[str(status) if status != 200 else "empty"] += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {
        "completed": len(latencies),
        "expected": requests,
        "errors": dict(statuses),
        "per_s": len(latencies) / elapsed,
        "p50_ms": (percentile(latencies, 50) or 0) * 1000,
        "p95_ms": (percentile(latencies, 95) or 0) * 1000,
        "seconds": elapsed,
    }


def row(label: str, level: dict[str, Any], cpu: dict[str, float | None] | None) -> str:
    daphne = sum(v or 0 for k, v in (cpu or {}).items() if k.startswith("server")) if cpu else None
    host = (cpu or {}).get("host")
    errors = ",".join(f"{k}:{v}" for k, v in level["errors"].items()) or "-"
    daphne_text = f"{daphne:.0f}" if daphne is not None else "-"
    host_text = f"{host:.0f}" if host is not None else "-"
    per_turn = cpu_ms_per_turn(level, daphne)
    per_turn_text = f"{per_turn:.1f}" if per_turn is not None else "-"
    return (
        f"{label:<28} {level['completed']:>5}/{level['expected']:<5} {level['per_s']:>8.1f} "
        f"{level['p50_ms']:>8.0f} {level['p95_ms']:>8.0f} {daphne_text:>8} {per_turn_text:>8} {host_text:>6}  {errors}"
    )


def cpu_ms_per_turn(level: dict[str, Any], percent: float | None) -> float | None:
    """Milliseconds of server CPU per completed turn: its % of one core over the level's wall time, per turn."""
    if not percent or not level["completed"]:
        return None
    return percent / 100 * level["seconds"] * 1000 / level["completed"]


async def peer_level(peer: Any, concurrency: int, requests: int, stream: bool) -> tuple[dict[str, Any], dict]:
    """One level through the peer gateway, with its process's CPU."""
    window = CpuWindow({"server litellm": peer.pid})
    window.start()
    level = await run_level(
        [f"{peer.base_url}/chat/completions"], {"Authorization": f"Bearer {peer_litellm.KEY}"}, peer_litellm.MODEL,
        concurrency, requests, stream,
    )  # fmt: skip
    return level, window.stop()


async def run(
    args: argparse.Namespace, servers: list[Any], secret: str, model: str, model_base: str, peer: Any = None
) -> list[dict]:
    await wait_ready(servers)
    urls = [f"http://{HOST}:{s.port}/v1/chat/completions" for s in servers]
    headers = {"Authorization": f"Bearer {secret}"}
    pids = {f"server daphne {s.port}": s.pid for s in servers}
    # Warm-up, not measured: imports, pools, caches.
    await run_level(urls, headers, model, len(servers) * 2, len(servers) * 10, stream=False)
    if peer is not None:
        await peer_level(peer, 2, 10, stream=False)
    print(
        f"{'':<28} {'done':>11} {'turns/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'server%':>8} {'CPU ms':>8} {'host%':>6}"
        "  errors"
    )
    results = []
    for concurrency in args.levels:
        for stream in (False, True):
            mode = "streaming" if stream else "blocking"
            window = CpuWindow(pids)
            window.start()
            level = await run_level(urls, headers, model, concurrency, args.requests, stream)
            cpu = window.stop()
            base_window = CpuWindow({})
            base_window.start()
            baseline = await run_level(
                [f"{model_base}/chat/completions"], {"Authorization": "Bearer bench"}, MODEL, concurrency,
                args.requests, stream,
            )  # fmt: skip
            base_cpu = base_window.stop()
            print(row(f"C={concurrency} {mode} platform", level, cpu), flush=True)
            print(row(f"C={concurrency} {mode} model alone", baseline, base_cpu), flush=True)
            ratio = level["per_s"] / baseline["per_s"] if baseline["per_s"] else 0
            print(f"{'':<28} platform / model alone: {ratio:.2f}x turns/s", flush=True)
            result = {"concurrency": concurrency, "mode": mode, "platform": level, "model": baseline, "cpu": cpu}
            if peer is not None:
                peer_result, peer_cpu = await peer_level(peer, concurrency, args.requests, stream)
                print(row(f"C={concurrency} {mode} LiteLLM proxy", peer_result, peer_cpu), flush=True)
                ratio = level["per_s"] / peer_result["per_s"] if peer_result["per_s"] else 0
                print(f"{'':<28} platform / LiteLLM proxy: {ratio:.2f}x turns/s", flush=True)
                result.update(peer=peer_result, peer_cpu=peer_cpu)
            results.append(result)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(
        __doc__, description=__doc__.split("\n\n")[0],
        smoke="C = 2, 6 requests of 10-token replies in each mode; every request must succeed",
    )  # fmt: skip
    parser.add_argument("--concurrency", default="10,50,100")
    parser.add_argument("--requests", type=int, default=300, help="requests per concurrency level and mode")
    parser.add_argument("--daphne", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument(
        "--peer", choices=("litellm", "none"), default="litellm",
        help="a peer gateway's row beside the platform's (LiteLLM's proxy, when `make litellm` built its venv)",
    )  # fmt: skip
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.smoke:
        args.concurrency, args.requests, args.tokens, args.daphne = "2", 6, 10, 1
    args.levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    run_id = uuid.uuid4().hex[:10]
    environment = {**bench_environment(args, run_id), "API_KEY_RATE": "1000000/s"}
    require_redis(args.redis_url)
    ensure_postgres(args.database_url)
    os.environ.update(environment)
    setup_django()

    from llm.fake_server import spawn

    script = {"defaults": {"delay": 0, "chunk_size": 0}, "rules": [{"when": {}, "reply": {"text_tokens": args.tokens}}]}
    model_process, model_port = spawn(script)
    model_base = f"http://{HOST}:{model_port}/v1"
    servers: list[Any] = []
    peer = None
    try:
        ensure_fixtures(4, model_base, provider_timeout=30.0)
        secret, model = make_key()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(BASE_DIR), os.environ.get("PYTHONPATH")]))}
        servers = start_daphne(args.daphne, env, Path(tempfile.mkdtemp(prefix="load-openai-")))
        if args.peer == "litellm" and peer_litellm.available():
            peer = peer_litellm.start(model_base, MODEL, free_port())
        elif args.peer == "litellm":
            log("no LiteLLM proxy row: its virtualenv is not built (make litellm)")
        print(
            f"# load_openai | {args.daphne} Daphne | model {args.tokens} tokens at zero delay | "
            f"C={args.concurrency} | {args.requests} requests per level and mode | db={args.database_url} "
            f"redis={args.redis_url}",
            flush=True,
        )
        results = asyncio.run(run(args, servers, secret, model, model_base, peer))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
            log(f"wrote {args.json}")
        if args.smoke:
            smoke_check(
                f"C={result['concurrency']} {result['mode']} {side}: {level['completed']}/{level['expected']} "
                f"completed, errors {level['errors'] or '-'}"
                for result in results
                for side, level in (("platform", result["platform"]), ("model alone", result["model"]))
                if level["completed"] != level["expected"] or level["errors"]
            )
    finally:
        peer_litellm.stop(peer)
        stop_daphne(servers)
        model_process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            model_process.wait(timeout=5)
        delete_redis_keys(args.redis_url, [environment["CHAT_STREAM_PREFIX"], environment["CHANNELS_PREFIX"]])


if __name__ == "__main__":
    main()
