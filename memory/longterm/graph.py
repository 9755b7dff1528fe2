"""The picture of a user's event graph: where each event and relation goes in an SVG, computed without a database.

Events run left to right by time, one column each, in a lane per actor (user, assistant, system); every `columns`
events the timeline wraps into a new row of lanes, so 200 events make a picture a page can scroll, not a line
thousands of pixels long. Each (row, column) holds one event, so nodes never overlap. Relations are cubic curves
with their label at the curve's middle; a superseded event is marked and linked to the event that replaced it.
The memory page renders the result (templates/memory/graph.html); nothing here reads the database.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

NODE_WIDTH = 168
NODE_HEIGHT = 64
NODE_PADDING = 8
COLUMN_GAP = 72  # wide enough for a relation label between two columns
LANE_GAP = 18
ROW_GAP = 56
MARGIN = 20
TOP = ROW_GAP  # room above the first row for relations arching over a lane
PARALLEL_GAP = 14
LANE_LABEL_WIDTH = 84
COLUMNS = 10
# A node shows its summary on two lines of about 24 narrow characters (a CJK character counts two).
LABEL_UNITS = 24
LABEL_LINES = 2
EDGE_LABEL_CHARS = 20
ACTOR_ORDER = ("user", "assistant", "system")
SUPERSEDED = "superseded_by"


@dataclass(frozen=True)
class GraphEvent:
    """One event as the picture needs it (`pk` is the row id the node links to)."""

    pk: int
    event_id: str
    timestamp: dt.datetime
    actor: str
    summary: str
    caption: str = ""
    status: str = "completed"
    superseded_by: int | None = None


@dataclass(frozen=True)
class GraphRelation:
    """source -kind-> target, between two events' row ids; `label` is what the edge says (translated)."""

    source: int
    target: int
    kind: str
    label: str = ""


@dataclass(frozen=True)
class Node:
    event: GraphEvent
    x: int
    y: int
    row: int
    column: int
    lane: int
    lines: tuple[str, ...]
    lane_count: int = 1
    width: int = NODE_WIDTH
    height: int = NODE_HEIGHT

    @property
    def right(self) -> int:
        return self.x + self.width

    @property
    def bottom(self) -> int:
        return self.y + self.height

    @property
    def center_x(self) -> float:
        return self.x + self.width / 2

    @property
    def center_y(self) -> float:
        return self.y + self.height / 2

    @property
    def caption_position(self) -> tuple[int, int]:
        return self.x + NODE_PADDING, self.y + 16

    @property
    def label_rows(self) -> list[tuple[int, int, str]]:
        """(x, y, text) of each summary line inside the node."""
        return [(self.x + NODE_PADDING, self.y + 34 + 16 * number, line) for number, line in enumerate(self.lines)]

    @property
    def superseded(self) -> bool:
        return self.event.superseded_by is not None

    @property
    def classes(self) -> str:
        names = ["node", f"actor-{self.event.actor}", f"status-{self.event.status}"]
        if self.superseded:
            names.append("superseded")
        return " ".join(names)

    def overlaps(self, other: Node) -> bool:
        return self.x < other.right and other.x < self.right and self.y < other.bottom and other.y < self.bottom


@dataclass(frozen=True)
class Edge:
    source: int
    target: int
    kind: str
    label: str
    path: str
    label_x: int
    label_y: int

    @property
    def classes(self) -> str:
        return f"edge edge-{self.kind.replace('_', '-')}"


@dataclass(frozen=True)
class LaneLabel:
    text: str
    x: int
    y: int
    band_x: int
    band_y: int
    band_width: int
    band_height: int


@dataclass(frozen=True)
class Layout:
    width: int
    height: int
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    lanes: list[LaneLabel] = field(default_factory=list)

    @property
    def view_box(self) -> str:
        return f"0 0 {self.width} {self.height}"

    def node(self, pk: int) -> Node | None:
        return next((node for node in self.nodes if node.event.pk == pk), None)


def _units(character: str) -> int:
    return 2 if unicodedata.east_asian_width(character) in ("W", "F") else 1


def clip_lines(text: str, *, units: int = LABEL_UNITS, lines: int = LABEL_LINES) -> tuple[str, ...]:
    """`text` on at most `lines` lines of `units` width each (breaking at spaces where it can), the last one
    ending in an ellipsis when the text goes on."""
    words = " ".join((text or "").split())
    result: list[str] = []
    while words and len(result) < lines:
        width, cut = 0, len(words)
        for number, character in enumerate(words):
            width += _units(character)
            if width > units:
                cut = number
                break
        if cut < len(words):
            space = words.rfind(" ", 0, cut + 1)
            if space > cut // 2:  # break at a word when one ends in the second half of the line
                cut = space
        line, words = words[:cut].rstrip(), words[cut:].lstrip()
        result.append(line)
    if words and result:
        last = result[-1]
        while last and sum(_units(c) for c in last) + 1 > units:
            last = last[:-1]
        result[-1] = last.rstrip() + "…"
    return tuple(result)


def clip(text: str, limit: int = EDGE_LABEL_CHARS) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _lanes_of(events: Sequence[GraphEvent]) -> list[str]:
    present = {event.actor for event in events}
    known = [actor for actor in ACTOR_ORDER if actor in present]
    return known + sorted(present - set(ACTOR_ORDER))


def _curve(x1: float, y1: float, c1: tuple[float, float], c2: tuple[float, float], x2: float, y2: float):
    path = f"M{x1:.0f},{y1:.0f} C{c1[0]:.0f},{c1[1]:.0f} {c2[0]:.0f},{c2[1]:.0f} {x2:.0f},{y2:.0f}"
    # The curve's point at t = 1/2, where its label goes.
    middle_x = 0.125 * x1 + 0.375 * c1[0] + 0.375 * c2[0] + 0.125 * x2
    middle_y = 0.125 * y1 + 0.375 * c1[1] + 0.375 * c2[1] + 0.125 * y2
    return path, round(middle_x), round(middle_y)


def _edge(source: Node, target: Node, kind: str, label: str, offset: float = 0.0) -> Edge:
    """The curve from `source` to `target`; `offset` moves it sideways so that several relations between the same
    two events run side by side instead of on top of each other."""
    if source.row == target.row:
        if source.lane == target.lane and abs(source.column - target.column) > 1:
            # Along one lane past other events: arch over them (the bottom lane under them) through the gap.
            below = source.lane > 0 and source.lane == target.lane and source.lane == _last_lane(source)
            # A row gap is shared by the row above's bottom lane and the row below's top lane: half each.
            room = ROW_GAP // 2 if source.lane == 0 or below else LANE_GAP
            lift = min(room - 6, 14 + 6 * abs(source.column - target.column)) / 1.05
            sign = 1 if below else -1
            x1, x2 = source.center_x + offset, target.center_x + offset
            y1, y2 = (source.bottom, target.bottom) if below else (source.y, target.y)
            c1, c2 = (x1, y1 + sign * lift * 1.4), (x2, y2 + sign * lift * 1.4)
        else:
            forward = source.x < target.x
            x1 = source.right if forward else source.x
            x2 = target.x if forward else target.right
            y1, y2 = source.center_y + offset, target.center_y + offset
            bend = max(24.0, abs(x2 - x1) / 3) * (1 if forward else -1)
            c1, c2 = (x1 + bend, y1), (x2 - bend, y2)
    else:
        down = source.row < target.row
        x1, x2 = source.center_x + offset, target.center_x + offset
        y1 = source.bottom if down else source.y
        y2 = target.y if down else target.bottom
        bend = max(30.0, abs(y2 - y1) / 2) * (1 if down else -1)
        c1, c2 = (x1, y1 + bend), (x2, y2 - bend)
    path, label_x, label_y = _curve(x1, y1, c1, c2, x2, y2)
    return Edge(source.event.pk, target.event.pk, kind, clip(label or kind), path, label_x, label_y)


def _last_lane(node: Node) -> int:
    return node.lane_count - 1


def _spread(links: list[tuple[Node, Node, str, str]]) -> list[Edge]:
    """Edges of `links`; the relations between one pair of events are spread PARALLEL_GAP apart."""
    pairs: dict[frozenset[int], int] = {}
    for source, target, _kind, _label in links:
        pair = frozenset((source.event.pk, target.event.pk))
        pairs[pair] = pairs.get(pair, 0) + 1
    seen: dict[frozenset[int], int] = {}
    edges = []
    for source, target, kind, label in links:
        pair = frozenset((source.event.pk, target.event.pk))
        number = seen.get(pair, 0)
        seen[pair] = number + 1
        edges.append(_edge(source, target, kind, label, offset=(number - (pairs[pair] - 1) / 2) * PARALLEL_GAP))
    return edges


def layout(
    events: Sequence[GraphEvent],
    relations: Sequence[GraphRelation] = (),
    *,
    columns: int = COLUMNS,
    lane_labels: Mapping[str, str] | None = None,
    superseded_label: str = "superseded by",
) -> Layout:
    """Place `events` (any order; drawn oldest first) and the `relations` between them. Relations to events not
    given are left out; a superseded event gets an edge to its successor when both are drawn."""
    if columns < 1:
        raise ValueError("A graph needs at least one column.")
    ordered = sorted(events, key=lambda event: (event.timestamp, event.pk))
    if not ordered:
        return Layout(width=0, height=0)
    lanes = _lanes_of(ordered)
    lane_index = {actor: number for number, actor in enumerate(lanes)}
    row_height = len(lanes) * NODE_HEIGHT + (len(lanes) - 1) * LANE_GAP
    rows = (len(ordered) + columns - 1) // columns
    left = MARGIN + LANE_LABEL_WIDTH
    nodes: list[Node] = []
    for number, event in enumerate(ordered):
        row, column, lane = number // columns, number % columns, lane_index[event.actor]
        nodes.append(
            Node(
                event=event,
                x=left + column * (NODE_WIDTH + COLUMN_GAP),
                y=TOP + row * (row_height + ROW_GAP) + lane * (NODE_HEIGHT + LANE_GAP),
                row=row,
                column=column,
                lane=lane,
                lines=clip_lines(event.summary),
                lane_count=len(lanes),
            )
        )
    used_columns = min(columns, len(ordered))
    width = left + used_columns * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP + MARGIN
    height = TOP + rows * row_height + rows * ROW_GAP  # the last row keeps a gap below for arches
    labels = lane_labels or {}
    lane_rows = [
        LaneLabel(
            text=str(labels.get(actor, actor)),
            x=MARGIN,
            y=TOP + row * (row_height + ROW_GAP) + lane * (NODE_HEIGHT + LANE_GAP) + NODE_HEIGHT // 2,
            band_x=MARGIN // 2,
            band_y=TOP + row * (row_height + ROW_GAP) + lane * (NODE_HEIGHT + LANE_GAP) - LANE_GAP // 2,
            band_width=width - MARGIN,
            band_height=NODE_HEIGHT + LANE_GAP,
        )
        for row in range(rows)
        for actor, lane in lane_index.items()
    ]
    by_pk = {node.event.pk: node for node in nodes}
    links = [
        (by_pk[relation.source], by_pk[relation.target], relation.kind, relation.label)
        for relation in relations
        if relation.source in by_pk and relation.target in by_pk and relation.source != relation.target
    ]
    links += [
        (node, by_pk[node.event.superseded_by], SUPERSEDED, superseded_label)
        for node in nodes
        if node.event.superseded_by in by_pk and node.event.superseded_by != node.event.pk
    ]
    return Layout(width=width, height=height, nodes=nodes, edges=_spread(links), lanes=lane_rows)
