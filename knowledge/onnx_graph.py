"""A BERT encoder as an ONNX graph of onnxruntime's fused transformer operators (EmbedLayerNormalization,
Attention, SkipLayerNormalization, BiasGelu: one kernel per block instead of dozens of small ones), saved and
quantised to int8. knowledge.minilm_onnx and knowledge.e5_onnx build their models with it, once per machine;
running a model needs onnxruntime only, so this module (and the `onnx` package) is imported only to build one.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MICROSOFT = "com.microsoft"
EMBEDDINGS = "embeddings."


class _Graph:
    """The nodes and initializers of an encoder graph being written, from BERT weights under BERT's names."""

    def __init__(self, weights: dict[str, np.ndarray], epsilon: float) -> None:
        self.weights = weights
        self.epsilon = epsilon
        self.initializers: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []

    def constant(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value, dtype=np.float32), name))
        return name

    def linear(self, name: str) -> np.ndarray:  # stored [out, in]; the graph multiplies x @ W
        return self.weights[name].T

    def matmul(self, source: str, name: str, weight: str, target: str) -> onnx.NodeProto:
        """x @ W, the node named so quantisation can be traced."""
        return helper.make_node("MatMul", [source, self.constant(name, self.linear(weight))], [target], name=name)

    def residual_norm(self, source: str, skip: str, norm: str, bias: str, target: str) -> onnx.NodeProto:
        """LayerNorm(source + bias + skip) with the LayerNorm weights under the prefix `norm`."""
        return helper.make_node(
            "SkipLayerNormalization",
            [
                source,
                skip,
                self.constant(f"{target}_gamma", self.weights[norm + ".weight"]),
                self.constant(f"{target}_beta", self.weights[norm + ".bias"]),
                self.constant(f"{target}_bias", self.weights[bias]),
            ],
            [target],
            domain=MICROSOFT,
            epsilon=self.epsilon,
        )

    def embedded_inputs(self, hidden_size: int) -> tuple[list[onnx.ValueInfoProto], list[str]]:
        """The input `embeddings` (word + position + type, computed by the caller) and its LayerNorm to hidden_0;
        no mask: one unpadded text per call, every token attends to every token."""
        w = self.weights
        self.nodes.append(
            helper.make_node(
                "LayerNormalization",
                [
                    "embeddings",
                    self.constant("embeddings_gamma", w[EMBEDDINGS + "LayerNorm.weight"]),
                    self.constant("embeddings_beta", w[EMBEDDINGS + "LayerNorm.bias"]),
                ],
                ["hidden_0"],
                axis=-1,
                epsilon=self.epsilon,
            )
        )
        return [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", "sequence", hidden_size])], []

    def token_inputs(self) -> tuple[list[onnx.ValueInfoProto], list[str]]:
        """The inputs `input_ids` and `attention_mask` and the embedding tables' lookup and LayerNorm to hidden_0
        (the token-type embedding, always 0 for one sentence, folded into the position embedding)."""
        w = self.weights
        position = w[EMBEDDINGS + "position_embeddings.weight"] + w[EMBEDDINGS + "token_type_embeddings.weight"][0]
        self.nodes.append(
            helper.make_node(
                "EmbedLayerNormalization",
                [
                    "input_ids",
                    "",
                    self.constant("word_embeddings", w[EMBEDDINGS + "word_embeddings.weight"]),
                    self.constant("position_embeddings", position),
                    "",
                    self.constant("embeddings_gamma", w[EMBEDDINGS + "LayerNorm.weight"]),
                    self.constant("embeddings_beta", w[EMBEDDINGS + "LayerNorm.bias"]),
                    "attention_mask",
                ],
                ["hidden_0", "mask_index"],
                domain=MICROSOFT,
                epsilon=self.epsilon,
            )
        )
        inputs = [
            helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["batch", "sequence"]),
        ]
        return inputs, ["mask_index"]

    def encoder_layer(self, layer: int, hidden: str, *, heads: int, mask: list[str]) -> str:
        """One encoder layer on `hidden`: attention, projection and residual norm, feed-forward and residual norm.
        Returns the name of its output."""
        w, p = self.weights, f"encoder.layer.{layer}."
        qkv = np.concatenate([self.linear(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")], axis=1)
        qkv_bias = np.concatenate([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
        output = f"hidden_{layer + 1}"
        self.nodes += [
            helper.make_node(
                "Attention",
                [hidden, self.constant(f"qkv_{layer}", qkv), self.constant(f"qkv_bias_{layer}", qkv_bias), *mask],
                [f"attention_{layer}"],
                name=f"attention_{layer}",
                domain=MICROSOFT,
                num_heads=heads,
            ),
            self.matmul(
                f"attention_{layer}", f"out_{layer}", p + "attention.output.dense.weight", f"projected_{layer}"
            ),
            self.residual_norm(
                f"projected_{layer}",
                hidden,
                p + "attention.output.LayerNorm",
                p + "attention.output.dense.bias",
                f"attended_{layer}",
            ),
            self.matmul(f"attended_{layer}", f"up_{layer}", p + "intermediate.dense.weight", f"up_{layer}_out"),
            helper.make_node(
                "BiasGelu",
                [f"up_{layer}_out", self.constant(f"up_bias_{layer}", w[p + "intermediate.dense.bias"])],
                [f"activated_{layer}"],
                domain=MICROSOFT,
            ),
            self.matmul(f"activated_{layer}", f"down_{layer}", p + "output.dense.weight", f"down_{layer}_out"),
            self.residual_norm(
                f"down_{layer}_out", f"attended_{layer}", p + "output.LayerNorm", p + "output.dense.bias", output
            ),
        ]
        return output


def float32_graph(
    weights: dict[str, np.ndarray],
    *,
    layers: int,
    heads: int,
    epsilon: float,
    name: str,
    embeddings_input: bool = False,
) -> onnx.ModelProto:
    """A BERT encoder (all-MiniLM-L6-v2: 6 layers, 12 heads, hidden 384) as onnxruntime fused operators.

    Inputs `input_ids` and `attention_mask` (int32, [batch, sequence], padding on the right); output the last
    hidden state [batch, sequence, hidden] (mean pooling and normalisation are the caller's). Token type ids are
    always 0 for one sentence, so the token-type embedding is folded into the position embedding.

    With `embeddings_input`, the graph has no embedding tables: its one input `embeddings` (float32, [batch,
    sequence, hidden], one unpadded text) is word + position + type embedding, computed by the caller, and the
    graph starts with their LayerNorm (multilingual-e5's 250,000-row table stays out of it; knowledge.e5_onnx).
    """
    graph = _Graph(weights, epsilon)
    hidden_size = int(weights[EMBEDDINGS + "LayerNorm.weight"].shape[0])
    inputs, mask = graph.embedded_inputs(hidden_size) if embeddings_input else graph.token_inputs()
    hidden = "hidden_0"
    for layer in range(layers):
        hidden = graph.encoder_layer(layer, hidden, heads=heads, mask=mask)
    output = helper.make_tensor_value_info(hidden, TensorProto.FLOAT, ["batch", "sequence", hidden_size])
    model = helper.make_graph(graph.nodes, name, inputs, [output], initializer=graph.initializers)
    return helper.make_model(model, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MICROSOFT, 1)])


def save_graph(graph: onnx.ModelProto, target: Path, *, quantized: bool = True) -> None:
    """Save a float32 graph to `target`, quantised first if asked, atomically: a reader never sees half a file."""
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
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415 - ~0.4 s to import; only quantising needs it

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
