"""Every benchmark has a --smoke run that CI makes (bench/smoke.py, `make bench-smoke` in .ci/run), so a change that
breaks a benchmark fails CI; a smoke fails on what a benchmark counts instead of raising."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

from bench.load_ws import smoke_failures
from bench.smoke import smokes
from tests.test_bench_needs import BENCHES

ROOT = Path(__file__).resolve().parents[1]


def test_every_bench_has_a_smoke_that_ci_runs():
    args = argparse.Namespace(database_url="postgres://db", redis_url="redis://r", pgvector_url="postgres://v",
                              realtalk=None)  # fmt: skip
    commands = smokes(args)
    scripts = {command[0] for command in commands.values()}
    assert scripts == set(BENCHES) - {"bench/smoke.py"}
    assert all("--smoke" in command for command in commands.values())
    assert "make bench-smoke" in (ROOT / ".ci" / "run").read_text()


def test_realtalk_builds_smoke_converts_a_sample_when_there_is_no_copy():
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_"))}
    result = subprocess.run([sys.executable, "bench/realtalk_build.py", "--smoke"], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no copy of REALTALK given: converting a made-up sample in its layout")
    assert "bench/memory_recall.py loads it: 2 conversations, 10 turns, 6 questions" in result.stdout


def _level(**changes) -> dict:
    row = {
        **{"mode": "load", "run": "platform", "concurrency": 2, "turns_expected": 4, "turns_completed": 4},
        **{"ttft_p50_ms": 15.0, "errors": {}, "closes": {}, "lost": 0, "duplicated": 0, "daphne_log": {"WARNING": 1}},
    }
    return {**row, **changes}


def test_a_load_smoke_fails_on_a_refused_turn_a_close_or_a_traceback():
    idle = {"mode": "idle", "sockets": 4, "opened": 4, "answered_after_hold": 4, "errors": {}, "closes": {},
            "daphne_log": {}}  # fmt: skip
    assert smoke_failures([_level(), _level(run="model", lost=None, duplicated=None, daphne_log={}), idle]) == []
    assert smoke_failures([_level(turns_completed=3, errors={"refused busy": 1})]) == [
        "C=2 platform: 3/4 turns completed", "C=2 platform: errors refused busy x1",
    ]  # fmt: skip
    assert smoke_failures([_level(closes={"close 1011": 1}, daphne_log={"Traceback": 1, "ERROR": 2})]) == [
        "C=2 platform: closes close 1011 x1",
        "C=2 platform: Daphne logged ERROR x2, Traceback x1 (its log is named above)",
    ]
    assert smoke_failures([{**idle, "answered_after_hold": 3}]) == ["idle, 4 sockets: 4 opened, 3 answered"]
    assert smoke_failures([_level(run="model", ttft_p50_ms=None)]) == [
        "C=2 model: no first text seen in 4 turns (no TTFT)"
    ]
