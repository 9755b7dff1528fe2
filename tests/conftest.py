"""Shared fixtures. In CI, REQUIRE_SERVICES=1 makes a missing PostgreSQL or Redis fail the run instead of skipping."""

from __future__ import annotations

import os
import uuid

import pytest
from django.conf import settings

from tenants.models import Role
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, TenantFactory, UserFactory

pytest_plugins = ["tests.fixtures_llm"]

REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES") == "1"


def _database_vendor() -> str:
    engine = settings.DATABASES["default"]["ENGINE"]
    return engine.rsplit(".", 1)[-1]


def _channel_layer_backend() -> str:
    return settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]


def pytest_report_header(config) -> list[str]:
    return [
        f"database vendor: {_database_vendor()}; channel layer: {_channel_layer_backend()}; "
        f"celery broker: {settings.CELERY_BROKER_URL.split('@')[-1]}; REQUIRE_SERVICES={int(REQUIRE_SERVICES)}"
    ]


def pytest_sessionstart(session) -> None:
    if not REQUIRE_SERVICES:
        return
    problems = []
    if _database_vendor() != "postgresql":
        problems.append("DATABASE_URL does not point at PostgreSQL")
    if _channel_layer_backend() != "RedisChannelLayer":
        problems.append("REDIS_URL is not set, so the channel layer is in-memory")
    if problems:
        pytest.exit("REQUIRE_SERVICES=1 but " + "; ".join(problems), returncode=3)


@pytest.fixture(scope="session", autouse=True)
def _close_database_pools(django_db_setup, django_db_blocker):
    """Give every thread's connection back and close the pool before the test database is dropped (PostgreSQL
    refuses to drop a database with open sessions): this thread's, and asgiref's single thread's, where Channels'
    middleware reads sessions and users."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    def close_all() -> None:
        for connection in connections.all(initialized_only=True):
            connection.close()

    with django_db_blocker.unblock():
        SyncToAsync.single_thread_executor.submit(close_all).result(timeout=10)
        close_all()
        if getattr(connections["default"], "pool", None) is not None:
            connections["default"].close_pool()


@pytest.fixture
def redis_url() -> str:
    """The Redis of this machine; a test that needs it fails in CI when it is missing, and skips elsewhere."""
    url = settings.REDIS_URL
    if not url:
        if REQUIRE_SERVICES:
            pytest.fail("REDIS_URL is not set and REQUIRE_SERVICES=1")
        pytest.skip("REDIS_URL is not set")
    return url


@pytest.fixture
def tenant(db):
    return TenantFactory(name="能源示范", slug="energy")


@pytest.fixture
def other_tenant(db):
    return TenantFactory(name="餐厅示范", slug="restaurant")


@pytest.fixture
def member(tenant):
    return MembershipFactory(tenant=tenant, role=Role.MEMBER, user=UserFactory(username="member")).user


@pytest.fixture
def tenant_admin(tenant):
    user = UserFactory(username="tenant-admin", is_staff=True)
    MembershipFactory(tenant=tenant, user=user, role=Role.ADMIN)
    return user


@pytest.fixture
def other_tenant_admin(other_tenant):
    user = UserFactory(username="other-admin", is_staff=True)
    MembershipFactory(tenant=other_tenant, user=user, role=Role.ADMIN)
    return user


@pytest.fixture
def superuser(db):
    return UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def in_tenant(tenant):
    """Run the test body inside `tenant`'s scope."""
    with tenant_scope(tenant):
        yield tenant


@pytest.fixture
def login(client):
    """Log a user into the test client and make `tenant` their active tenant."""

    def _login(user, tenant=None):
        client.force_login(user)
        if tenant is not None:
            session = client.session
            session["active_tenant_id"] = tenant.pk
            session.save()
        return client

    return _login


def pytest_collection_modifyitems(config, items) -> None:
    # Playwright's sync API keeps an event loop running in the main thread while the browser lives; running the
    # browser tests last keeps it away from the asyncio tests.
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture(autouse=True)
def _english_unless_asked(request):
    """Code under test speaks English unless a test asks for another language (a request's Accept-Language,
    translation.override): the site default is zh-hans, and a language activated by one test must not leak."""
    from django.utils import translation

    with translation.override("en"):
        yield


REQUIRE_PGVECTOR = os.environ.get("REQUIRE_PGVECTOR") == "1"


@pytest.fixture
def pgvector_db(db):
    """The test database has pgvector (the Chunk embedding column is a `vector`). Tests using this are marked
    `pgvector`; CI runs them against scripts/pgvector-server with REQUIRE_PGVECTOR=1, where a missing extension
    fails instead of skipping."""
    from django.db import connection

    from knowledge.fields import column_is_vector

    if not column_is_vector(connection, "knowledge_chunk", "embedding"):
        message = "the test database has no pgvector (start scripts/pgvector-server and point DATABASE_URL at it)"
        if REQUIRE_PGVECTOR:
            pytest.fail(message)
        pytest.skip(message)
    return connection


@pytest.fixture(autouse=True)
def _fresh_search_caches():
    """Per-process search structures are keyed by database and knowledge-base id; a rolled-back test database
    hands the same ids out again (SQLite's sequences roll back too), so every test starts without them."""
    from knowledge import retrieval
    from tenants.generation import TenantMemo

    retrieval.clear_caches()
    TenantMemo.clear_all()  # what requests keep of a tenant's rows, by tenant id too
    yield


@pytest.fixture(scope="session")
def _asgi_server(django_db_setup, django_db_blocker):
    # Importing daphne.server installs Twisted's asyncio reactor: before anything imports twisted.internet.reactor.
    import daphne.server  # noqa: F401

    from tests.live import AsgiLiveServer

    server = AsgiLiveServer()
    with django_db_blocker.unblock():
        server.start()
    yield server
    server.stop()


@pytest.fixture
def asgi_live_server(_asgi_server, transactional_db, settings):
    """Like pytest-django's `live_server`, but ASGI: websockets are served (pytest-django's server is WSGI only).

    Daphne runs in a thread of this process, so it shares the test database (the SQLite file included) and the
    in-memory channel layer. Twisted's reactor cannot restart, so one server lives for the whole session.
    """
    # A fresh chat frame log in Redis for each test: a recreated test database reuses conversation ids, and an
    # earlier run's frames or running-turn claim for the same id must not leak in.
    settings.CHAT_STREAM_PREFIX = f"chat-test-{uuid.uuid4().hex[:12]}"
    yield _asgi_server
    _asgi_server.settle()  # before transactional_db's flush (this fixture's teardown runs first)
