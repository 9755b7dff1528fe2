"""The event graph's layout (memory.longterm.graph): pure, no database. Nodes never overlap (200 events
included), the picture wraps into rows instead of growing without end, edges carry their relation's label,
superseded events are marked and linked to their successor, and labels are capped."""

from __future__ import annotations

import datetime as dt
import itertools
import random

import pytest

from memory.longterm.graph import (
    COLUMNS,
    LABEL_UNITS,
    NODE_HEIGHT,
    NODE_WIDTH,
    GraphEvent,
    GraphRelation,
    clip_lines,
    layout,
)

START = dt.datetime(2025, 7, 17, 10, 0, tzinfo=dt.UTC)
KINDS = ["causes", "follows", "refers_to", "resolves"]
LABELS = {"causes": "causes", "follows": "follows", "refers_to": "refers to", "resolves": "resolves"}


def _events(count: int, seed: int = 7) -> list[GraphEvent]:
    rng = random.Random(seed)
    return [
        GraphEvent(
            pk=number + 1,
            event_id=f"evt_{number}",
            timestamp=START + dt.timedelta(minutes=number),
            actor=rng.choice(["user", "assistant", "system"]),
            summary=f"Event {number}: " + "a rather long summary of what happened " * rng.randint(0, 4),
            superseded_by=number + 2 if number % 17 == 0 and number + 1 < count else None,
        )
        for number in range(count)
    ]


def _relations(events: list[GraphEvent], seed: int = 7) -> list[GraphRelation]:
    rng = random.Random(seed)
    relations = [GraphRelation(b.pk, a.pk, "follows", "follows") for a, b in itertools.pairwise(events)]
    for _ in range(len(events)):
        source, target = rng.sample(events, 2)
        kind = rng.choice(KINDS)
        relations.append(GraphRelation(source.pk, target.pk, kind, LABELS[kind]))
    return relations


def test_two_hundred_events_never_overlap_and_stay_inside_the_picture():
    events = _events(200)
    picture = layout(list(reversed(events)), _relations(events))
    assert len(picture.nodes) == 200
    for a, b in itertools.combinations(picture.nodes, 2):
        assert not a.overlaps(b), (a.event.pk, b.event.pk)
    for node in picture.nodes:
        assert node.x >= 0 and node.right <= picture.width
        assert node.y >= 0 and node.bottom <= picture.height
        assert len(node.lines) <= 2
    assert picture.view_box == f"0 0 {picture.width} {picture.height}"
    # Wrapped into rows of COLUMNS events: about two thousand pixels wide, however many events there are.
    assert picture.width < (COLUMNS + 1) * (NODE_WIDTH + 80)
    assert len({node.row for node in picture.nodes}) == 200 // COLUMNS


def test_events_run_left_to_right_by_time_in_a_lane_per_actor():
    events = _events(25)
    picture = layout(random.Random(1).sample(events, len(events)))
    ordered = sorted(picture.nodes, key=lambda node: (node.row, node.column))
    assert [node.event.pk for node in ordered] == [event.pk for event in events]
    for node in picture.nodes:
        assert node.lane == ["user", "assistant", "system"].index(node.event.actor)
    first_row = [node for node in ordered if node.row == 0]
    assert [node.x for node in first_row] == sorted(node.x for node in first_row)
    lanes = {(lane.text, lane.y) for lane in picture.lanes}
    assert len(lanes) == 3 * 3  # three rows of three lanes


def test_every_relation_is_an_edge_with_its_label_and_missing_ends_are_left_out():
    events = _events(6)
    relations = [
        GraphRelation(1, 2, "causes", "causes"),
        GraphRelation(5, 3, "refers_to", "refers to"),
        GraphRelation(4, 2, "resolves", "resolves"),
        GraphRelation(6, 99, "follows", "follows"),  # the target is not drawn
        GraphRelation(3, 3, "follows", "follows"),  # no loops
    ]
    picture = layout(events, relations, superseded_label="superseded by")
    drawn = {(edge.source, edge.target, edge.kind): edge for edge in picture.edges}
    assert set(drawn) == {(1, 2, "causes"), (5, 3, "refers_to"), (4, 2, "resolves"), (1, 2, "superseded_by")}
    assert drawn[(5, 3, "refers_to")].label == "refers to"
    assert drawn[(1, 2, "superseded_by")].label == "superseded by"
    for edge in picture.edges:
        assert edge.path.startswith("M") and " C" in edge.path
        assert 0 <= edge.label_x <= picture.width and 0 <= edge.label_y <= picture.height
        assert edge.classes.startswith("edge edge-")


def test_a_superseded_event_is_marked():
    events = _events(3)
    picture = layout(events)
    marked = {node.event.pk for node in picture.nodes if "superseded" in node.classes}
    assert marked == {1}
    assert "status-completed" in picture.node(2).classes and "actor-" in picture.node(2).classes


def test_an_edge_between_rows_leaves_one_node_from_below_and_enters_the_other_from_above():
    events = _events(12)
    picture = layout(events, [GraphRelation(1, 12, "causes", "causes")], columns=5)
    edge = next(edge for edge in picture.edges if edge.kind == "causes")
    source, target = picture.node(1), picture.node(12)
    start = edge.path.split()[0][1:].split(",")
    end = edge.path.split()[-1].split(",")
    assert float(start[1]) == source.bottom and float(end[1]) == target.y
    assert source.row == 0 and target.row == 2


def test_labels_are_capped_in_width_also_for_chinese():
    assert clip_lines("Short") == ("Short",)
    assert clip_lines("") == ()
    lines = clip_lines("word " * 40)
    assert len(lines) == 2 and lines[-1].endswith("…")
    chinese = clip_lines("台风导致A港口关闭，订单四十二的货物延误了三天，客户要求改走B港口并且尽快发货")
    assert len(chinese) == 2 and chinese[-1].endswith("…")
    for line in (*lines, *chinese):
        width = sum(2 if "\u4e00" <= c <= "\u9fff" or c in "，" else 1 for c in line)
        assert width <= LABEL_UNITS
    long_label = layout(_events(2), [GraphRelation(2, 1, "causes", "x" * 80)]).edges[0].label
    assert len(long_label) <= 20 and long_label.endswith("…")


def test_no_events_is_an_empty_picture_and_columns_must_be_positive():
    assert layout([]).nodes == [] and layout([]).width == 0
    with pytest.raises(ValueError, match="at least one column"):
        layout(_events(2), columns=0)


def test_node_boxes_have_the_documented_size():
    node = layout(_events(1)).nodes[0]
    assert (node.width, node.height) == (NODE_WIDTH, NODE_HEIGHT)
    assert [y for _x, y, _text in node.label_rows] == sorted(y for _x, y, _text in node.label_rows)
    assert all(node.y < y < node.bottom for _x, y, _text in node.label_rows)


def test_relations_between_the_same_two_events_run_side_by_side():
    events = _events(2)
    picture = layout(events, [GraphRelation(2, 1, "follows", "follows"), GraphRelation(1, 2, "causes", "causes")])
    follows, causes = picture.edges[:2]
    assert follows.path != causes.path
    assert abs(follows.label_y - causes.label_y) >= 12 or abs(follows.label_x - causes.label_x) >= 40


def test_arches_along_a_lane_stay_inside_the_picture_and_off_the_other_rows():
    events = [
        GraphEvent(pk=n + 1, event_id=f"e{n}", timestamp=START + dt.timedelta(minutes=n), actor=actor, summary="s")
        for n, actor in enumerate(["user", "assistant", "user", "assistant", "user", "assistant"] * 2)
    ]
    relations = [GraphRelation(5, 1, "refers_to", "refers to"), GraphRelation(6, 2, "refers_to", "refers to"),
                 GraphRelation(11, 7, "refers_to", "refers to")]  # fmt: skip
    picture = layout(events, relations, columns=6)
    for edge in picture.edges:
        ys = [float(point.split(",")[1]) for point in edge.path.replace("M", "").replace("C", "").split()]
        assert min(ys) >= 0 and max(ys) <= picture.height
        source = picture.node(edge.source)
        if source.lane == 0:
            assert edge.label_y < source.y  # over the top lane
        else:
            assert edge.label_y > source.bottom  # under the bottom lane
        rows = [node for node in picture.nodes if node.row != source.row]
        assert not any(node.y <= edge.label_y <= node.bottom for node in rows)
