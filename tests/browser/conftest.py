"""Browser tests: Debian's Chromium driven by Playwright against the live test server."""

import os
import shutil
import uuid

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Playwright's sync API drives the browser from the test thread while the live server answers from its own.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail("Chromium is not installed (apt-get install chromium); `make test` installs it as root")
        pytest.skip("Chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page_for(browser):
    """A fresh page in a browser context speaking the given language."""
    contexts = []

    def _page(locale: str = "zh-CN"):
        context = browser.new_context(locale=locale)
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield _page
    for context in contexts:
        context.close()


class AsgiLiveServer:
    """Daphne serving config.asgi (HTTP and websockets) on 127.0.0.1, in a thread of the test process."""

    def __init__(self) -> None:
        import threading

        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="asgi-live-server", daemon=True)
        self._server = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        from daphne.server import Server

        from config.asgi import application

        def ready() -> None:
            from twisted.internet import reactor

            def poll() -> None:
                if self._server.listening_addresses:
                    self.port = self._server.listening_addresses[0][1]
                    self._ready.set()
                else:
                    reactor.callLater(0.05, poll)

            reactor.callLater(0, poll)

        try:
            self._server = Server(
                application=application,
                endpoints=["tcp:port=0:interface=127.0.0.1"],
                signal_handlers=False,
                ready_callable=ready,
                application_close_timeout=2,
            )
            self._server.run()
        except BaseException as exc:  # reported to the fixture, which fails the test with it
            self._error = exc
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(15) or self._error is not None:
            raise RuntimeError(f"Daphne did not start: {self._error!r}")

    def stop(self) -> None:
        from twisted.internet import reactor

        if reactor.running:
            reactor.callFromThread(reactor.stop)
        self._thread.join(10)


@pytest.fixture(scope="session")
def _asgi_server(django_db_setup, django_db_blocker):
    # Importing daphne.server installs Twisted's asyncio reactor: before anything imports twisted.internet.reactor.
    import daphne.server  # noqa: F401

    server = AsgiLiveServer()
    with django_db_blocker.unblock():
        server.start()
    yield server
    server.stop()


@pytest.fixture
def asgi_live_server(_asgi_server, transactional_db, settings):
    """Like pytest-django's `live_server`, but ASGI: websockets are served (pytest-django's server is WSGI only).

    Daphne runs in a thread of this process, so it shares the test database (SQLite in memory included) and the
    in-memory channel layer. Twisted's reactor cannot restart, so one server lives for the whole session.
    """
    # A fresh chat frame log in Redis for each test: a recreated test database reuses conversation ids, and an
    # earlier run's frames or running-turn claim for the same id must not leak in.
    settings.CHAT_STREAM_PREFIX = f"chat-test-{uuid.uuid4().hex[:12]}"
    return _asgi_server
