"""Every benchmark says what it needs (its --help prints a "Needs:" paragraph) and stops with what to do when
something is missing, instead of a traceback (bench/common.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import Missing, _create_role

ROOT = Path(__file__).resolve().parents[1]
# The scripts one runs (helper modules, and load_asgi.py that Daphne imports, have no __main__).
BENCHES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "bench").rglob("*.py")
                 if 'if __name__ == "__main__":' in path.read_text())  # fmt: skip


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_"))}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env={**environment, **env}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize("bench", BENCHES)
def test_each_benchs_help_says_what_it_needs(bench):
    assert len(BENCHES) >= 7
    result = _run(bench, "--help")
    assert result.returncode == 0, result.stderr
    needs = result.stdout.partition("\nNeeds: ")[2]
    assert "make install" in needs
    if bench != "bench/smoke.py":  # the runner of the others' smokes
        assert "--smoke " in result.stdout, "every benchmark has a --smoke run for CI (bench/smoke.py)"


def test_load_ws_without_postgresql_says_how_to_get_it():
    result = _run("bench/load_ws.py", "--database-url", "postgres://agentplat@127.0.0.1:1/agentplat_bench")
    assert result.returncode == 1
    assert result.stderr.startswith("bench: cannot connect to PostgreSQL at 127.0.0.1:1 as agentplat (")
    assert "Start PostgreSQL" in result.stderr and "Traceback" not in result.stderr


def test_load_ws_without_redis_says_how_to_get_it():
    result = _run("bench/load_ws.py", "--redis-url", "redis://127.0.0.1:1/14")
    assert result.returncode == 1
    assert result.stderr.startswith("bench: Redis at redis://127.0.0.1:1/14 does not answer")
    assert "Traceback" not in result.stderr


def test_a_bench_without_its_data_names_the_missing_file(tmp_path):
    result = _run("bench/memory_recall.py", BENCH_DATA_DIR=str(tmp_path))
    assert result.returncode == 1
    assert f"bench: missing benchmark data: {tmp_path}/memory/locomo_dev.json" in result.stderr
    assert "BENCH_DATA_DIR" in result.stderr and "Traceback" not in result.stderr


def test_a_missing_role_on_another_machine_is_not_created_but_explained():
    with pytest.raises(Missing) as missing:
        _create_role("postgres://agentplat@db.internal:5432/agentplat_bench", "agentplat", "db.internal:5432")
    assert "has no role agentplat" in str(missing.value)
    assert "createuser -h 127.0.0.1 -U postgres --createdb agentplat" in str(missing.value)
