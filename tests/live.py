"""Daphne in a thread of the test process: the browser tests' and the API tests' live ASGI server."""

from __future__ import annotations


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

    def settle(self, timeout: float = 2.0) -> bool:
        """Wait until no HTTP request is being answered (open websockets are left alone), at most `timeout` seconds:
        a request still writing after its test (a key's last use, a session's close) must not hold a table the test
        database's flush waits for (seen in CI: a deadlock between the two). True when it settled."""
        import time  # as above: nothing at import time of this module

        from daphne.ws_protocol import WebSocketProtocol  # after daphne.server chose the reactor

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                running = [
                    details["application_instance"]
                    for protocol, details in list(self._server.connections.items())
                    if not isinstance(protocol, WebSocketProtocol) and "application_instance" in details
                ]
            except RuntimeError:  # the reactor's thread changed the dict while it was read
                continue
            if all(instance.done() for instance in running):
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        from twisted.internet import reactor

        if reactor.running:
            reactor.callFromThread(reactor.stop)
        self._thread.join(10)
