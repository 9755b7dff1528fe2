"""Request bodies are bounded while Daphne reads them (the probe's finding: an anonymous 200 MB POST to the login page
took Daphne to 2.7 GB): a body announced or found too large is answered 413 at once, and the application never sees
it; knowledge-base uploads have their own, larger limit."""

from __future__ import annotations

import socket
import time

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def _post(
    port: int, path: str, headers: dict[str, str], chunks: list[bytes], pause: float = 0.0
) -> tuple[bytes, float]:
    """Send a POST, then `chunks` until the server answers or closes; returns what it answered and how long it took."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
        sock.sendall(head.encode())
        answer = b""
        for chunk in chunks:
            try:
                sock.sendall(chunk)
            except OSError:  # the server closed the connection: the rest of the body is not wanted
                break
            if pause:
                time.sleep(pause)
        sock.settimeout(10)
        try:
            while data := sock.recv(65536):
                answer += data
        except OSError:
            pass
    return answer, time.monotonic() - started


def test_an_announced_oversized_body_is_refused_before_it_is_read(asgi_live_server, settings):
    settings.REQUEST_MAX_BYTES = 1_000_000
    answer, seconds = _post(asgi_live_server.port, "/accounts/login/",
                            {"Content-Length": str(200_000_000), "Content-Type": "application/x-www-form-urlencoded"},
                            [b"x" * 65536] * 4)  # fmt: skip
    assert answer.startswith(b"HTTP/1.1 413") and "请求体超过 1 MB".encode() in answer
    assert seconds < 5


def test_a_chunked_body_is_refused_once_it_passes_the_limit(asgi_live_server, settings):
    settings.REQUEST_MAX_BYTES = 200_000
    piece = b"y" * 50_000
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    answer, _seconds = _post(asgi_live_server.port, "/accounts/login/",
                             {"Transfer-Encoding": "chunked", "Content-Type": "application/x-www-form-urlencoded"},
                             [chunk] * 100, pause=0.005)  # fmt: skip
    assert answer.startswith(b"HTTP/1.1 413")


def test_a_body_within_the_limit_reaches_the_application(asgi_live_server, settings):
    settings.REQUEST_MAX_BYTES = 200_000
    body = b"username=x&password=y"
    answer, _seconds = _post(asgi_live_server.port, "/accounts/login/",
                             {"Content-Length": str(len(body)), "Content-Type": "application/x-www-form-urlencoded",
                              "Connection": "close"}, [body])  # fmt: skip
    assert answer.startswith(b"HTTP/1.1 403")  # Django answered (no CSRF token): the body got through


def test_uploads_to_a_knowledge_base_have_their_own_limit(asgi_live_server, settings):
    settings.REQUEST_MAX_BYTES = 100_000
    settings.REQUEST_MAX_UPLOAD_BYTES = 1_000_000
    size = 300_000
    headers = {"Content-Length": str(size), "Content-Type": "application/octet-stream", "Connection": "close"}
    upload, _seconds = _post(asgi_live_server.port, "/knowledge/1/upload/", headers, [b"z" * size])
    assert not upload.startswith(b"HTTP/1.1 413")
    other, _seconds = _post(asgi_live_server.port, "/agents/new/", headers, [b"z" * size])
    assert other.startswith(b"HTTP/1.1 413")
