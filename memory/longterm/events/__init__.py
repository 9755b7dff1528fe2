"""The event graph of seed 2: events extracted from each turn, typed relations, entities, retrieval along causes.

Extraction (after a turn, off the reply path: memory.tasks.extract_turn_memory) takes one of two ways, an agent
setting:
- `model` (`extract`): a separate call to the execution-tier model, which answers JSON (EXTRACTION_SCHEMA); the
  answer is validated against the schema, an invalid one is sent back once with the errors (one repair), and a
  second invalid answer is skipped and counted (MemoryMetric.skipped).
- `rules` (`rules`): no model call (offline): one event per message, entities by part-of-speech (jieba) and
  capitalised names, `follows` the previous event of the conversation, `refers_to` the last event that named the
  same entity. Rules cannot see causes, contradictions or resolutions: those need the model.
Storing (`storing`) dedupes by the normalised summary (the same fact twice is one event), marks events an
extraction says are superseded (with when and by what; never deleted), and merges entities by normalised name and
type, and keeps the times an event speaks of (`when`) as DATE entities. Retrieval (`walk`) follows relations from
the events a query finds and ranks what it reaches with them; `passages` places them in the reply's context.

The names callers use are importable from here.
"""

from memory.longterm.events.extract import (
    COMBINED_PROMPT,
    EXTRACTION_PROMPT,
    EXTRACTION_SCHEMA,
    Extraction,
    ExtractionInvalid,
    extract_with_model,
    known_events_text,
    parse_extraction,
)
from memory.longterm.events.passages import timeline
from memory.longterm.events.rules import rule_entities, rule_event, rule_events, statements
from memory.longterm.events.storing import StoreOutcome, events_store, new_event_id, search_text
from memory.longterm.events.walk import Walked, events_walk

__all__ = [
    "COMBINED_PROMPT",
    "EXTRACTION_PROMPT",
    "EXTRACTION_SCHEMA",
    "Extraction",
    "ExtractionInvalid",
    "StoreOutcome",
    "Walked",
    "events_store",
    "events_walk",
    "extract_with_model",
    "known_events_text",
    "new_event_id",
    "parse_extraction",
    "rule_entities",
    "rule_event",
    "rule_events",
    "search_text",
    "statements",
    "timeline",
]
