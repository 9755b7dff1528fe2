"""Cutting sections into token-sized chunks (K2).

Text is split into sentences at Chinese (。！？；…) and English (. ! ? ;) sentence punctuation and at line
breaks; sentences are packed into chunks of at most `chunk_size` tokens (tiktoken's cl100k_base, as
`llm.tokens.count_text` counts them), and each chunk starts with the previous chunk's last whole sentences up to
`chunk_overlap` tokens. A sentence is cut only when it alone is longer than a chunk: first at clause punctuation
(，、：, :), then at token boundaries. Records (CSV rows, JSON records) stay one chunk each unless they are longer
than the chunk size. Chunks never span sections (a PDF page, a Markdown heading's text).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from knowledge.parsing import Section
from llm.tokens import count_text, get_encoding

# The end of a sentence: Chinese punctuation (closing quotes and brackets stay with it), English punctuation
# followed by a space or the end, or a line break (runs of them, so blank lines stay with the sentence before).
_SENTENCE_END = re.compile(
    r"[。！？；…!?]+[”’」』）)\"']*"
    r"|[.;]+[”’\"')\]]*(?=\s|$)"
    r"|\n+"
)
_CLAUSE_END = re.compile(r"[，、：,:]+\s*|\s+")


@dataclass
class ChunkDraft:
    """A chunk before it is embedded and stored."""

    position: int
    text: str
    token_count: int
    metadata: dict[str, Any] = field(default_factory=dict)


def split_sentences(text: str) -> list[str]:
    """`text` cut after each sentence end; the pieces joined give `text` back."""
    pieces: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        # Spaces after a sentence belong to it, so the next one starts with a word.
        while end < len(text) and text[end] in " \t\u3000":
            end += 1
        if end > start:
            pieces.append(text[start:end])
            start = end
    if start < len(text):
        pieces.append(text[start:])
    # A piece of nothing but white space joins the one before it.
    merged: list[str] = []
    for piece in pieces:
        if merged and not piece.strip():
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


def _cut_by_tokens(text: str, size: int) -> list[str]:
    """Last resort for a clause longer than a chunk: cut at token boundaries (whole characters)."""
    encoding = get_encoding("cl100k_base")
    tokens = encoding.encode(text, disallowed_special=())
    _decoded, offsets = encoding.decode_with_offsets(tokens)
    cuts = [offsets[i] for i in range(size, len(tokens), size)]
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if text[a:b]]


def _fit(sentence: str, size: int) -> list[tuple[str, int]]:
    """The sentence as units of at most `size` tokens: itself, or its clauses, or token-sized cuts."""
    tokens = count_text(sentence)
    if tokens <= size:
        return [(sentence, tokens)]
    clauses: list[str] = []
    start = 0
    for match in _CLAUSE_END.finditer(sentence):
        if match.end() > start:
            clauses.append(sentence[start : match.end()])
            start = match.end()
    if start < len(sentence):
        clauses.append(sentence[start:])
    units: list[tuple[str, int]] = []
    for clause in clauses:
        clause_tokens = count_text(clause)
        if clause_tokens <= size:
            units.append((clause, clause_tokens))
        else:
            units.extend((part, count_text(part)) for part in _cut_by_tokens(clause, size))
    # Pack clauses back together so a long sentence becomes as few units as possible.
    packed: list[tuple[str, int]] = []
    for text, count in units:
        if packed and packed[-1][1] + count <= size:
            packed[-1] = (packed[-1][0] + text, packed[-1][1] + count)
        else:
            packed.append((text, count))
    return packed


def _pack(units: list[tuple[str, int]], size: int, overlap: int) -> list[str]:
    """Whole units into chunks of at most `size` tokens, each starting with up to `overlap` tokens of the last."""
    chunks: list[str] = []
    current: list[tuple[str, int]] = []
    total = 0
    fresh = 0  # units in `current` that are not overlap
    for unit in units:
        if current and total + unit[1] > size and fresh:
            chunks.append("".join(text for text, _count in current))
            carried: list[tuple[str, int]] = []
            carried_tokens = 0
            for text, count in reversed(current):
                if carried_tokens + count > overlap or carried_tokens + count + unit[1] > size:
                    break
                carried.insert(0, (text, count))
                carried_tokens += count
            current, total, fresh = carried, carried_tokens, 0
        current.append(unit)
        total += unit[1]
        fresh += 1
    if fresh:
        chunks.append("".join(text for text, _count in current))
    return chunks


def chunk_text(text: str, *, chunk_size: int, chunk_overlap: int) -> list[str]:
    """`text` as chunks of at most `chunk_size` tokens with sentence overlap (see the module docstring)."""
    overlap = max(0, min(chunk_overlap, chunk_size // 2))
    units = [unit for sentence in split_sentences(text) for unit in _fit(sentence, chunk_size)]
    chunks: list[str] = []
    for chunk in _pack(units, chunk_size, overlap):
        chunks.extend(_within(chunk.strip(), chunk_size))
    return chunks


def _within(text: str, size: int) -> list[str]:
    """`text` if it is at most `size` tokens, else cut at token boundaries until every part is. Packing adds the
    units' own counts, and tokens do not add up exactly: BPE may join or split differently where two units meet."""
    if not text:
        return []
    if count_text(text) <= size:
        return [text]
    step = size
    while step > 0:
        parts = [part.strip() for part in _cut_by_tokens(text, step) if part.strip()]
        if all(count_text(part) <= size for part in parts):
            return parts
        step -= 1
    return [text]  # not reached: one token is always within size


def chunk_sections(sections: Iterable[Section], *, chunk_size: int, chunk_overlap: int) -> list[ChunkDraft]:
    """Every section's chunks, numbered from 0 across the document, each with its section's metadata."""
    drafts: list[ChunkDraft] = []
    for section in sections:
        text = section.text.strip()
        if not text:
            continue
        if section.record:
            tokens = count_text(text)
            if tokens <= chunk_size:
                drafts.append(ChunkDraft(len(drafts), text, tokens, dict(section.metadata)))
                continue
        pieces = chunk_text(text, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
        for part, piece in enumerate(pieces):
            metadata = dict(section.metadata)
            if section.record and len(pieces) > 1:
                metadata["part"] = part + 1
            drafts.append(ChunkDraft(len(drafts), piece, count_text(piece), metadata))
    return drafts
