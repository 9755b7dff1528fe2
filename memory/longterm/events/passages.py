"""What the reply sees of the event graph: the walked events placed in the system message within a token budget.

Each event is shown cut to the sentences around what matches the walk's query (`excerpts`, at most EXCERPT_CHARS:
more events fit the budget; issue 38). The events are taken best first (the walk's fused order) while they fit; an
event whose summary repeats one already taken (the same normalised text, or contained in it) is left out; events
linked by `follows` (neighbouring turns of one conversation) are merged into one passage that names its day once;
the passages are ordered by time, the events inside a passage too. One line per passage:

    2023-05-08 [evt_…] user/report: … | [evt_…] assistant/answer: … {causes → evt_…}

Event ids stay (a combined answer relates new events to them); `causes` and `resolves` are written out, `follows`
is what a passage is and `refers_to` (a shared name) is left out; superseded and pending events are marked.
"""

from __future__ import annotations

from django.utils import timezone

from llm.tokens import count_text
from memory.longterm import store
from memory.longterm.events import excerpts
from memory.longterm.events.when import DATE_TYPE
from memory.models import Event, EventStatus, RelationKind

SHOWN_RELATIONS = (RelationKind.CAUSES, RelationKind.RESOLVES)
LINE_COST = 2  # tokens a line costs beyond its text (what memory.longterm.recall counts)
EXCERPT_CHARS = 80  # an event's text at most, cut around what matches the query (excerpts)
DUPLICATE_OVERLAP = 0.0  # an event sharing this share of its terms with a taken one says nothing new (0: off)
SESSION_EVENTS = 0  # events of one session taken before the other sessions' (0: no limit)


def _passages(events: list[Event], neighbours: dict[int, set[int]]) -> list[list[Event]]:
    """`events` grouped into runs of neighbours (each run in time order), the runs in time order: an event joins the
    first run (in the order the runs were begun) that holds one of its neighbours."""
    ordered = sorted(events, key=lambda event: (event.timestamp, event.pk))
    runs: list[list[Event]] = []
    run_of: dict[int, int] = {}  # event -> its run (one lookup per neighbour, not a scan of every run per event)
    for event in ordered:
        joined = min((run_of[pk] for pk in neighbours.get(event.pk, ()) if pk in run_of), default=None)
        if joined is None:
            joined = len(runs)
            runs.append([])
        runs[joined].append(event)
        run_of[event.pk] = joined
    return runs


def _event_text(event: Event, links: list[str], shown: str) -> str:
    text = f"[{event.event_id}] {event.actor}/{event.action_type}: {shown}"
    if event.status != EventStatus.COMPLETED:
        text += f" ({event.status})"
    if event.superseded_by_id:
        text += f" (superseded by {event.superseded_by.event_id if event.superseded_by else '?'})"
    about = [entity["name"] for entity in event.entities or [] if entity.get("type") == DATE_TYPE]
    if about:
        text += f" (about {', '.join(about)})"
    if links:
        text += " {" + "; ".join(links) + "}"
    return text


def _render(run: list[Event], outgoing: dict[int, list[str]], texts: dict[int, str]) -> str:
    day = timezone.localtime(run[0].timestamp).strftime("%Y-%m-%d")
    return f"{day} " + " | ".join(_event_text(event, outgoing.get(event.pk, []), texts[event.pk]) for event in run)


def _repeats(summary: str, seen: list[str]) -> bool:
    """Whether a normalised summary says nothing the taken ones do not (equal, or inside a longer one)."""
    return any(summary == other or (len(summary) >= 20 and summary in other) for other in seen)


def _links(walked) -> tuple[dict[int, list[str]], dict[int, set[int]]]:
    """The relations a passage writes out (per source event) and each event's `follows` neighbours."""
    ids = {event.pk: event.event_id for event in walked.events}
    outgoing: dict[int, list[str]] = {}
    neighbours: dict[int, set[int]] = {}
    for relation in walked.relations:
        if relation.kind == RelationKind.FOLLOWS:
            neighbours.setdefault(relation.source_id, set()).add(relation.target_id)
            neighbours.setdefault(relation.target_id, set()).add(relation.source_id)
        elif relation.kind in SHOWN_RELATIONS:
            outgoing.setdefault(relation.source_id, []).append(f"{relation.kind} → {ids.get(relation.target_id, '?')}")
    return outgoing, neighbours


def _spread(events: list[Event]) -> list[Event]:
    """`events` in the order they are offered: the first SESSION_EVENTS of each session (conversation) in their
    order, then the rest in theirs (all in their order when SESSION_EVENTS is 0)."""
    if not SESSION_EVENTS:
        return list(events)
    per: dict[int | None, int] = {}
    first: list[Event] = []
    rest: list[Event] = []
    for event in events:
        per[event.conversation_id] = per.get(event.conversation_id, 0) + 1
        (first if per[event.conversation_id] <= SESSION_EVENTS else rest).append(event)
    return first + rest


def _overlaps(words: frozenset[str], taken: list[frozenset[str]]) -> bool:
    """Whether DUPLICATE_OVERLAP of an event's shown terms (three or more) are in one already taken."""
    if len(words) < 3:
        return False
    return any(len(words & other) >= DUPLICATE_OVERLAP * len(words) for other in taken)


class _Packer:
    """Takes the offered events while their passages fit the budget, skipping what repeats a taken one."""

    def __init__(self, walked, texts: dict[int, str], budget_tokens: int, model: str) -> None:
        self.outgoing, self.neighbours = _links(walked)
        self.texts, self.budget, self.model = texts, budget_tokens, model
        self.taken: list[Event] = []
        self.seen: list[str] = []
        self.words: list[frozenset[str]] = []
        self.lines: list[str] = []
        self.costs: dict[str, int] = {}  # a passage's tokens, counted once (most passages stay as they were)
        self.rendered: dict[tuple[int, ...], str] = {}  # a passage's line, by its events (rendered once)

    def _cost(self, line: str) -> int:
        if line not in self.costs:
            self.costs[line] = count_text(line, self.model) + LINE_COST
        return self.costs[line]

    def _render(self, run: list[Event]) -> str:
        key = tuple(event.pk for event in run)
        if key not in self.rendered:
            self.rendered[key] = _render(run, self.outgoing, self.texts)
        return self.rendered[key]

    def offer(self, event: Event) -> None:
        summary = store.normalise(event.content_summary)
        if _repeats(summary, self.seen):
            return
        words = excerpts.terms(self.texts[event.pk]) if DUPLICATE_OVERLAP else frozenset()
        if _overlaps(words, self.words):
            return
        trial = [self._render(run) for run in _passages([*self.taken, event], self.neighbours)]
        if sum(self._cost(line) for line in trial) > self.budget:
            return
        self.taken.append(event)
        self.seen.append(summary)
        self.words.append(words)
        self.lines = trial

    def shown(self) -> list[Event]:
        return [event for run in _passages(self.taken, self.neighbours) for event in run]


def timeline(
    walked, *, budget_tokens: int, model: str = "gpt-4", query: str | None = None
) -> tuple[list[str], list[Event]]:
    """The walked events as passages (see the module) within `budget_tokens`, best first while they fit, each event
    cut to the sentences around what matches `query` (default: the walk's query). Returns the lines (oldest first)
    and the events they show (in the same order)."""
    wanted = excerpts.query_terms(walked.query if query is None else query)
    texts = {event.pk: excerpts.excerpt(event.content_summary, wanted, limit=EXCERPT_CHARS) for event in walked.events}
    packer = _Packer(walked, texts, budget_tokens, model)
    for event in _spread(walked.events):
        packer.offer(event)
    return packer.lines, packer.shown()
