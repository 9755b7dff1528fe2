"""A peer OpenAI-compatible gateway for bench/load_openai.py: LiteLLM's proxy, in a virtualenv of its own
(.venv-litellm, `make litellm`, exact pins in requirements-litellm.txt), pointed at the same scripted model, one
worker, no database. It forwards a request and streams the answer back, storing nothing; the platform's turn also
stores the conversation, runs the agent's turn engine and counts usage, so the ratio reads "how far is a turn that
does all that from a gateway that does none of it".

Offline: LiteLLM reads its bundled model cost map (LITELLM_LOCAL_MODEL_COST_MAP) and sends no telemetry.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

BASE_DIR = Path(__file__).resolve().parent.parent
VENV = BASE_DIR / ".venv-litellm"
MODEL = "scripted"
KEY = "sk-bench-peer"


@dataclass
class Peer:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def available() -> bool:
    return (VENV / "bin" / "litellm").exists()


def _config(model_base: str, model: str) -> str:
    return (
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{model}\n"
        f"      api_base: {model_base}\n"
        "      api_key: bench\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  drop_params: true\n"
        "general_settings:\n"
        f"  master_key: {KEY}\n"
    )


def start(model_base: str, model: str, port: int, timeout: float = 120.0) -> Peer:
    """LiteLLM's proxy on 127.0.0.1:`port`, ready (its /health/liveliness answers), or RuntimeError with its log."""
    folder = Path(tempfile.mkdtemp(prefix="peer-litellm-"))
    config = folder / "config.yaml"
    config.write_text(_config(model_base, model))
    log_path = folder / "litellm.log"
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    for name in ("DATABASE_URL", "REDIS_URL"):  # the platform's, not the peer's: it runs without either
        env.pop(name, None)
    with log_path.open("wb") as output:
        process = subprocess.Popen(  # noqa: S603 (the peer's own venv, fixed arguments)
            [str(VENV / "bin" / "litellm"), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
             "--num_workers", "1"],
            cwd=folder, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    peer = Peer(process=process, port=port, log_path=log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=2, trust_env=False).status_code == 200:
                return peer
        time.sleep(0.5)
    stop(peer)
    raise RuntimeError(f"LiteLLM's proxy did not start; its log:\n{log_path.read_text()[-3000:]}")


def stop(peer: Peer | None) -> None:
    if peer is None or peer.process.poll() is not None:
        return
    peer.process.terminate()
    try:
        peer.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        peer.process.kill()
        peer.process.wait(timeout=5)
