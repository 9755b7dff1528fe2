"""The user–assistant memory sets (issue 38): bench/memorybank_build.py turns MemoryBank's layout into the bench's
input with evidence derived by its documented rule, and bench/memory_recall.py reads them with their dev and check
halves. Run on the committed made-up sample bench/data/memorybank_sample/ (no fetched data here)."""

import importlib.util
import io
import os
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module(monkeypatch, name: str):
    """A bench script as a module (its helpers only); bench/ goes on a copy of the path, as the script does."""
    monkeypatch.setattr(sys, "path", [str(ROOT / "bench"), *sys.path])
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def builder(monkeypatch):
    return _module(monkeypatch, "memorybank_build")


@pytest.fixture
def bench(monkeypatch):
    return _module(monkeypatch, "memory_recall")


def test_the_builder_labels_the_message_holding_the_questions_rarest_words(builder, tmp_path):
    rows = builder.build(builder.SAMPLE, builder.Language.EN, tmp_path / "en.json")

    ada, ben = rows
    assert (ada["sample_id"], ada["split"], ben["split"]) == ("mb-en-01", "dev", "check")
    assert ada["conversation"]["session_2_date_time"] == "9:00 am on 28 April, 2023"
    assert ada["conversation"]["session_1"][1] == {
        "speaker": "AI companion", "dia_id": "D1:2",
        "text": "Nice to meet you, Ada! The cello has a warm sound. Which piece are you practising first?",
    }  # fmt: skip
    labelled = {qa["question"]: (qa["evidence"], qa["category"]) for qa in ada["qa"] + ben["qa"]}
    assert labelled == {
        "Which instrument did I start learning?": (["D1:1"], 4),
        "What did I cook for my sister on April 28th?": (["D2:1"], 2),  # names a day: only that day is read
        "Which novel did you recommend to me?": (["D3:1"], 4),
        "How far did I run along the river?": (["D1:1"], 4),
        "Which museum was I going to visit?": (["D2:1"], 4),
    }
    # "What is the capital of Peru?" shares no word with Ada's history: dropped, not labelled.


def test_the_chinese_rule_reads_jieba_words_and_chinese_dates(builder, tmp_path):
    rows = builder.build(builder.SAMPLE, builder.Language.ZH, tmp_path / "zh.json")

    assert [row["sample_id"] for row in rows] == ["mb-zh-01", "mb-zh-02"]
    assert rows[0]["conversation"]["speaker_b"] == "AI伴侣"
    labelled = {qa["question"]: qa["evidence"] for row in rows for qa in row["qa"]}
    assert labelled["我4月28日给妹妹做了什么菜？"] == ["D2:1"]
    assert labelled["我沿着江边跑了多远？"] == ["D1:1"]
    assert "秘鲁的首都是哪里？" not in labelled
    assert builder.named_day("我曾经在5月4日这天分享了一些麻烦", builder.Language.ZH) == "2023-05-04"
    assert builder.named_day("在4月27号这天，我在公园里跑了多久？", builder.Language.ZH) == "2023-04-27"
    assert builder.named_day("On May 2nd I went to the museum", builder.Language.EN) == "2023-05-02"
    assert builder.named_day("What did you recommend?", builder.Language.EN) is None


def test_a_question_whose_words_are_everywhere_is_dropped(builder):
    messages = [builder.Message(f"D1:{n}", "2023-04-27", "Ann", "I like music a lot") for n in range(1, 6)]

    assert builder.evidence_for("What music do I like?", messages, builder.Language.EN, "Ann") == ([], "music")


def test_the_bench_reads_a_built_set_with_its_halves(builder, bench, tmp_path):
    path = tmp_path / "memorybank_en.json"
    builder.build(builder.SAMPLE, builder.Language.EN, path)

    samples = bench.load_locomo(path)

    assert [(s.sample_id, s.split, len(s.sessions), len(s.questions)) for s in samples] == [
        ("mb-en-01", "dev", 3, 3), ("mb-en-02", "check", 2, 2),
    ]  # fmt: skip
    assert samples[0].sessions[0].turns[0].content == "Ada: Hi, I am Ada. I started learning the cello last week."
    assert samples[0].questions[1].evidence == frozenset({"D2:1"})
    assert set(bench.SETS) == {
        "locomo", "realtalk", "memorybank-en", "memorybank-zh", "ualong-en", "ualong-zh", "ualong-en-topic",
        "ualong-zh-topic",
    }  # fmt: skip


def test_the_halves_table_pools_each_halfs_questions(bench):
    samples = [bench.Sample(sid, ("a", "b"), [], [], split=split) for sid, split in
               (("one", "dev"), ("two", "check"), ("three", "dev"))]  # fmt: skip
    by_sample = {}
    for sid, found in (("one", 1.0), ("two", 0.0), ("three", 0.5)):
        scores = bench.Scores()
        for column in bench.COLUMNS:
            scores.add(column, ["D1:1"] if found == 1.0 or column == "bm25" else ["D9:9"], frozenset({"D1:1"}))
            if found == 0.5:
                scores.add(column, ["D1:1"], frozenset({"D1:1"}))
        by_sample[(sid, "all")] = scores
    out = io.StringIO()
    with redirect_stdout(out):
        bench.print_splits(by_sample, samples)

    lines = out.getvalue().splitlines()
    dev = next(line for line in lines if line.strip().startswith("dev recall@10"))
    check = next(line for line in lines if line.strip().startswith("check recall@10"))
    assert "(2 conv., 3 q.)" in dev and "(1 conv., 1 q.)" in check
    # dev: one/one, three/1 of 2 -> memory 2/3, bm25 3/3; check: bm25 alone finds it.
    assert dev.split()[6:8] == ["0.667", "1.000"]
    assert check.split()[6:8] == ["0.000", "1.000"]


def test_the_smoke_runs_on_the_committed_sample_when_the_set_is_not_built(tmp_path):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_"))}
    environment["HOME"] = str(tmp_path)  # no built set under ~/.cache here
    command = [sys.executable, "bench/memory_recall.py", "--smoke", "--set", "memorybank-en", "--events", "0"]
    result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)

    assert result.returncode == 0, result.stderr[-2000:]
    assert "memorybank-en: not built here" in result.stdout
    assert "the set's halves" in result.stdout
    assert "mb-en-01 (Ada & AI companion" in result.stdout
