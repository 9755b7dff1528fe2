"""Production mode (DJANGO_DEBUG=0) names static files by collectstatic's manifest: commands that load the URLconf
(migrate's checks) must work before collectstatic has run, and the pages find the hashed files once it has."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Settings read STATIC_ROOT from the module: point it at the test's directory before Django configures itself.
SCRIPT = """
import sys
import django
import config.settings
config.settings.STATIC_ROOT = sys.argv[1]
django.setup()
from django.core.management import execute_from_command_line
from django.test import Client
execute_from_command_line(["manage.py", "migrate", "--noinput", "-v", "0"])  # with its checks, as typed
print("migrated", flush=True)
execute_from_command_line(["manage.py", "collectstatic", "--noinput", "-v", "0"])
response = Client().get("/favicon.ico", secure=True)
print(response.status_code, response["Location"])
"""


def test_migrate_before_collectstatic_in_production_mode(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_"))}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "x" * 60,
                "DJANGO_ALLOWED_HOSTS": "testserver", "VAR_DIR": str(tmp_path),
                "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"})  # fmt: skip
    static_root = tmp_path / "staticfiles"
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(static_root)], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=240)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    migrated, favicon = result.stdout.split("\n")[:2]
    assert migrated == "migrated"
    status, location = favicon.split()
    hashed = location.removeprefix("/static/")
    assert status == "302" and hashed.startswith("favicon.") and hashed.endswith(".svg") and hashed != "favicon.svg"
    assert (static_root / hashed).is_file()
