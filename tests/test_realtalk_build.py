"""bench/realtalk_build.py: REALTALK conversations become the LoCoMo shape bench/memory_recall.py loads, from a
checkout or a bare git directory, never from the data/locomo/ folder."""

import json
import subprocess
import sys
from pathlib import Path

from bench.memory_recall import load_locomo

ROOT = Path(__file__).resolve().parents[1]


def _chat(first: str, second: str) -> dict:
    message = {"img_file": [], "img_url": []}
    return {
        "name": {"speaker_1": first, "speaker_2": second},
        "session_1": [
            {**message, "clean_text": "I ran 5 km in the park today", "speaker": first, "dia_id": "D1:1",
             "date_time": "29.12.2023, 22:42:04"},
            {**message, "clean_text": "Look at this", "speaker": second, "dia_id": "D1:3",
             "date_time": "29.12.2023, 22:50:00", "blip_caption": "a dog on a beach"},
        ],
        "events_session_1": [],
        "session_1_date_time": "29.12.2023, 22:42:04",
        "session_2": [
            {**message, "clean_text": "Back from Miami", "speaker": second, "dia_id": "D2:1",
             "date_time": "03.01.2024, 09:05:00"},
        ],
        "session_2_date_time": "03.01.2024, 09:05:00",
        "qa": [
            {"question": "Where did they go?", "answer": "park, Miami", "evidence": ["D1:1; D2:1"], "category": 1},
            {"question": "Whose dog?", "answer": "x", "evidence": ["D 1:3.", "D1:2"], "category": 3},
            {"question": "When?", "answer": "x", "evidence": ["D1:2"], "category": 2},
        ],
    }  # fmt: skip


def _build(source: Path, output: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "bench/realtalk_build.py", str(source), "--output", str(output)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def _checkout(root: Path) -> Path:
    (root / "data" / "locomo").mkdir(parents=True)
    (root / "data" / "Chat_2_Ann_Bob.json").write_text(json.dumps(_chat("Ann", "Bob")))
    (root / "data" / "locomo" / "Chat_1_Caroline_Melanie.json").write_text(json.dumps(_chat("Caroline", "Melanie")))
    return root


def test_a_checkout_becomes_the_shape_the_memory_bench_loads(tmp_path):
    result = _build(_checkout(tmp_path / "REALTALK"), tmp_path / "set.json")
    assert result.returncode == 0, result.stderr
    assert "rt-2 (Ann & Bob): 2 sessions, 3 turns, 2 questions; dropped 2 evidence ids" in result.stdout

    (sample,) = load_locomo(tmp_path / "set.json")  # data/locomo/ was not read
    assert sample.sample_id == "rt-2" and sample.speakers == ("Ann", "Bob")
    assert [(s.number, s.when.isoformat()) for s in sample.sessions] == [
        (1, "2023-12-29T22:42:00+00:00"), (2, "2024-01-03T09:05:00+00:00"),
    ]  # fmt: skip
    assert [t.content for t in sample.turns] == [
        "Ann: I ran 5 km in the park today", "Bob: Look at this [shares a dog on a beach]", "Bob: Back from Miami",
    ]  # fmt: skip
    # "D1:1; D2:1" is two ids, "D 1:3." is D1:3; D1:2 names no message, so the question only on it is dropped
    assert [(q.category, sorted(q.evidence)) for q in sample.questions] == [(1, ["D1:1", "D2:1"]), (3, ["D1:3"])]


def test_a_bare_git_directory_is_read_at_its_head(tmp_path):
    work = _checkout(tmp_path / "work")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(work)]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "data"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(tmp_path / "repo")], check=True)

    result = _build(tmp_path / "repo", tmp_path / "set.json")
    assert result.returncode == 0, result.stderr
    assert [sample.sample_id for sample in load_locomo(tmp_path / "set.json")] == ["rt-2"]


def test_a_folder_without_conversations_says_what_to_give(tmp_path):
    result = _build(tmp_path, tmp_path / "set.json")
    assert result.returncode == 1
    assert "no REALTALK conversations" in result.stderr and "danny911kr/REALTALK" in result.stderr
    assert "Traceback" not in result.stderr
