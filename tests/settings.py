"""Test settings: the project's settings plus a small tenant-owned fixture app used to test the tenancy layer."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key-not-for-production-0123456789")
# Tasks run in-process in tests even when REDIS_URL is set; the broker is still checked by /healthz tests.
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.tenancy_fixture"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed: hashing is not under test
WHITENOISE_USE_FINDERS = True
STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}  # noqa: F405
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
# The scripted model server listens on 127.0.0.1; tests of the private-address guard turn this off themselves.
LLM_ALLOW_PRIVATE_BASE_URLS = True
# One member sends many messages quickly in tests (load, faults, browser journeys); the limit's own tests set it.
CHAT_USER_MESSAGES_PER_MINUTE = 0
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
# Uploads ingest synchronously in tests (eager Celery); tests of the background thread turn it on themselves.
KNOWLEDGE_INGEST_IN_THREAD = False
# Uploads (knowledge-base documents, demo data) go to a directory of the test run, never the project's var/.
# A worker process a test starts is given the test's own (TEST_MEDIA_ROOT), so it reads the files the test uploads.
MEDIA_ROOT = os.environ.get("TEST_MEDIA_ROOT") or tempfile.mkdtemp(prefix="agentplat-test-media-")
# Conversations' files, never under the checkout's var/ (a test that checks storage sets its own).
ATTACHMENT_STORAGE_ROOT = os.path.join(MEDIA_ROOT, "attachments")

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    # A transaction left open by a test's background work (a turn still running after its test, a thread that
    # stopped inside an atomic block) holds its locks until the server ends it: after 2 minutes, so a later test's
    # flush (TRUNCATE of every table) waits for that at worst instead of hanging the run.
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c idle_in_transaction_session_timeout=120s"  # noqa: F405

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, as `make run` has, not Django's default in-memory database: that one is in SQLite's shared-cache mode,
    # where a connection reading a table another thread is writing fails at once with "database table is locked"
    # (no busy wait applies there), so tests with a background thread (ingestion, the live ASGI server) failed now
    # and then under load. The file gets the product's WAL, immediate transactions and busy wait; its directory is
    # this process's own, so runs side by side never share it.
    _test_database_dir = tempfile.mkdtemp(prefix="agentplat-test-db-")
    atexit.register(shutil.rmtree, _test_database_dir, ignore_errors=True)
    DATABASES["default"]["TEST"] = {"NAME": os.path.join(_test_database_dir, "test.sqlite3")}  # noqa: F405
