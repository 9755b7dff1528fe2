"""An OpenAI-compatible HTTP server answering from a script: `python -m llm.fake_server --script FILE --port N`.

Chat completions (streaming SSE and not), /v1/models and deterministic /v1/embeddings (a script's
`embeddings: {delay: seconds}` slows each embeddings request down, as a busy endpoint), on 127.0.0.1 only. Tests
start it as a subprocess (tests/fixtures_llm.py) and steer it through a small control API:
`PUT /_control/script` (JSON body: a new script), `GET /_control/requests` (what it received),
`POST /_control/reset` (forget the requests, reset the rule counters). `--port 0` picks a free port; the server
prints `LISTENING <port>` once it accepts connections.
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
from pathlib import Path
from typing import Any

from llm.demo import DEMO_SCRIPT_PATH
from llm.script import ErrorPlan, ScriptEngine, StreamDropped, embed, load_script

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


class FakeServer:
    """The HTTP/1.1 server (keep-alive, chunked SSE) around one ScriptEngine."""

    def __init__(self, engine: ScriptEngine) -> None:
        self.engine = engine
        self.requests: list[dict[str, Any]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    break
                method, path, _version = request_line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length") or 0)
                body = await reader.readexactly(length) if length else b""
                keep_alive = await self.route(method, path.split("?", 1)[0], headers, body, writer)
                if not keep_alive or headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            with contextlib.suppress(RuntimeError):
                writer.close()

    async def route(
        self, method: str, path: str, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        payload: Any = None
        if body:
            try:
                payload = json.loads(body)
            except ValueError:
                return await self.send_json(
                    writer, 400, {"error": {"message": "Body is not JSON.", "type": "invalid_request_error"}}
                )
        if path.startswith("/_control/"):
            return await self.control(method, path, payload, writer)
        self.requests.append(
            {
                "method": method,
                "path": path,
                "authorization": headers.get("authorization", ""),
                "host": headers.get("host", ""),
                # Which of the client's connections sent it (its port): a test sees connections reused.
                "client_port": (writer.get_extra_info("peername") or (None, None))[1],
                "body": payload,
                "time": time.time(),
            }
        )
        if path.endswith("/chat/completions") and method == "POST":
            return await self.chat(payload or {}, writer)
        if path.endswith("/models") and method == "GET":
            data = [
                {"id": name, "object": "model", "created": 0, "owned_by": "scripted"} for name in self.engine.models
            ]
            return await self.send_json(writer, 200, {"object": "list", "data": data})
        if path.endswith("/embeddings") and method == "POST":
            return await self.embeddings(payload or {}, writer)
        return await self.send_json(
            writer, 404, {"error": {"message": f"No route {method} {path}", "type": "not_found"}}
        )

    async def control(self, method: str, path: str, payload: Any, writer: asyncio.StreamWriter) -> bool:
        if path == "/_control/script" and method in ("PUT", "POST"):
            self.engine.load(payload or {})
            return await self.send_json(writer, 200, {"ok": True})
        if path == "/_control/requests":
            return await self.send_json(writer, 200, {"requests": self.requests})
        if path == "/_control/reset" and method == "POST":
            self.requests.clear()
            self.engine.load(self.engine.script)
            return await self.send_json(writer, 200, {"ok": True})
        return await self.send_json(writer, 404, {"error": {"message": "unknown control path"}})

    async def chat(self, request: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        plan = self.engine.plan(request)
        if plan.stall:
            await asyncio.sleep(plan.stall)
        if isinstance(plan, ErrorPlan):
            return await self.send_json(writer, plan.status, plan.body, plan.headers)
        if not request.get("stream"):
            return await self.send_json(writer, 200, plan.completion)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        plan.stall = 0.0  # already waited above
        try:
            async for chunk in plan.stream():
                data = b"data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
        except StreamDropped:
            writer.transport.abort()  # mid-body, no terminating chunk: the client sees a broken stream
            return False
        done = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        await writer.drain()
        return True

    async def embeddings(self, request: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        delay = float((self.engine.script.get("embeddings") or {}).get("delay") or 0)
        if delay:
            await asyncio.sleep(delay)
        inputs = request.get("input", "")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs)
        dimensions = int(request.get("dimensions") or 64)
        data = [
            {"object": "embedding", "index": i, "embedding": embed(str(text), dimensions)}
            for i, text in enumerate(inputs)
        ]
        used = sum(max(1, len(str(text)) // 4) for text in inputs)
        body = {
            "object": "list",
            "data": data,
            "model": request.get("model", "scripted-embed"),
            "usage": {"prompt_tokens": used, "total_tokens": used},
        }
        return await self.send_json(writer, 200, body)

    @staticmethod
    async def send_json(
        writer: asyncio.StreamWriter, status: int, body: Any, headers: dict[str, str] | None = None
    ) -> bool:
        data = json.dumps(body, ensure_ascii=False).encode()
        head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        for name, value in (headers or {}).items():
            head += f"{name}: {value}\r\n"
        writer.write(head.encode() + b"\r\n" + data)
        await writer.drain()
        return True


async def serve(script: dict[str, Any], port: int, host: str = "127.0.0.1") -> None:
    server = FakeServer(ScriptEngine(script))
    listener = await asyncio.start_server(server.handle, host, port)
    actual_port = listener.sockets[0].getsockname()[1]
    print(f"LISTENING {actual_port}", flush=True)
    async with listener:
        await listener.serve_forever()


def spawn(script: dict[str, Any], *, timeout: float = 15.0) -> tuple[subprocess.Popen, int]:
    """Start this server as a subprocess on a free 127.0.0.1 port with `script`; returns the process and port.

    Used by the pytest fixture (tests/fixtures_llm.py) and the benchmark (bench/llm_overhead.py).
    """
    handle, name = tempfile.mkstemp(prefix="llm-script-", suffix=".json")
    with os.fdopen(handle, "w") as file:
        json.dump(script, file)
    process = subprocess.Popen(  # noqa: S603 (our own module, fixed arguments)
        [sys.executable, "-m", "llm.fake_server", "--script", name, "--port", "0"],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = process.stdout.readline() if process.stdout else ""
        if line.startswith("LISTENING"):
            return process, int(line.split()[1])
        if process.poll() is not None:
            break
    process.kill()
    raise RuntimeError(f"The fake model server did not start (last output: {line!r}).")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", help="YAML or JSON script file (default: the demo script)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    args = parser.parse_args(argv)

    script = load_script(args.script or DEMO_SCRIPT_PATH)
    try:
        asyncio.run(serve(script, args.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
