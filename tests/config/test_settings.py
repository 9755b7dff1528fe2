"""Production mode refuses to start without a secret key, and says why."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _start(env_overrides: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings", **env_overrides})
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_without_secret_key_refuses_with_an_explanation():
    result = _start({"DJANGO_DEBUG": "0"})
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr
    assert "refuses to start" in result.stderr
    assert "started" not in result.stdout


def test_production_with_a_secret_key_starts():
    result = _start({"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "x" * 60})
    assert result.returncode == 0, result.stderr
    assert "started" in result.stdout


def test_development_generates_and_keeps_a_secret(tmp_path):
    env = {"DJANGO_DEBUG": "1", "VAR_DIR": str(tmp_path)}
    first = _start(env)
    assert first.returncode == 0, first.stderr
    secret = (tmp_path / "dev-secret-key").read_text()
    assert len(secret) >= 50
    assert _start(env).returncode == 0
    assert (tmp_path / "dev-secret-key").read_text() == secret


def test_the_embedded_sqlite_database_waits_instead_of_failing(tmp_path):
    """Two uploads while ingestion writes used to fail with "database is locked" (the probe's finding)."""
    script = (
        "import django; django.setup(); from django.db import connection; c = connection.cursor(); "
        "print(c.execute('PRAGMA journal_mode').fetchone()[0], c.execute('PRAGMA busy_timeout').fetchone()[0])"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_"))}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "1", "VAR_DIR": str(tmp_path),
                "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"})  # fmt: skip
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["wal", "20000"]
