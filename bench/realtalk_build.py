"""Build a second long-term memory set for bench/memory_recall.py from REALTALK (issue 30): a held-out check of the
memory recall tuned on the two LoCoMo dev conversations.

    .venv/bin/python bench/realtalk_build.py /work/.mirror/danny911kr+REALTALK/repo     # a fetched git directory
    .venv/bin/python bench/realtalk_build.py ~/REALTALK                                 # or a checkout
    .venv/bin/python bench/memory_recall.py --events 0 --per-sample \\
        --data ~/.cache/agentplat-memory-bench/realtalk.json

REALTALK (github danny911kr/REALTALK, Lee et al. 2025, arXiv 2502.13270) is ten real messaging-app conversations
between two people over 21 days (18-25 sessions, 410-1,548 messages each, 8,944 in all) with memory-probing
questions in LoCoMo's layout: each question has the dia_ids of its evidence turns and a category (1 multi-hop,
2 temporal, 3 commonsense inference, which the bench scores as LoCoMo's 3). The repository has no licence file,
so the data is not shipped here: this script reads the ten files `data/Chat_<n>_<names>.json` from a copy and
writes the set in LoCoMo's shape (what memory_recall.load_locomo reads), outside the repository by default.
The repository's data/locomo/ folder (LoCoMo split by conversation) is never read.

What the conversion does: a message's `clean_text` becomes the turn's text (its photo caption kept as LoCoMo's
`blip_caption`), a session's date ("29.12.2023, 22:42:04", its first message's) is written as LoCoMo's
"10:42 pm on 29 December, 2023". Evidence ids are read as the annotators typed them ("D1:11; D3:18", "D 2:18",
"D20:17.", "23:29"); 136 of the 1,791 name a message missing from the conversation (dia_ids skip, e.g. D20:10
between D20:9 and D20:11): no method can find those, so they are dropped from the question's evidence, and the
22 questions (of 728) left with no evidence are dropped; the script prints how many per conversation. The set:
706 questions (288 multi-hop, 313 temporal, 105 commonsense), 1,655 evidence turns, 8,944 turns.

Needs: `make install` (the standard library and git only); a copy of github danny911kr/REALTALK (the `fetch` tool's
git directory, a checkout, or a folder holding the Chat_*.json files). CI has no copy (the data is not shipped): there
`--smoke` converts a small made-up sample in REALTALK's layout instead (its evidence ids typed in the ways above, one
naming no message), says so, and checks that bench/memory_recall.py loads the result; given a copy, `--smoke`
converts its first conversation.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Missing, bench_parser, smoke_check

OUTPUT = Path.home() / ".cache" / "agentplat-memory-bench" / "realtalk.json"
# Only the top level of data/: data/locomo/ holds LoCoMo's conversations, which are not this set.
CHAT = re.compile(r"(?:data/)?Chat_(\d+)_[^/]+\.json")
SESSION = re.compile(r"session_(\d+)")
# An evidence id as the annotators typed it: "D3:7", also "D 2:18", "D20:17.", "23:29", "D17;39", several in one string.
EVIDENCE = re.compile(r"D?\s*(\d+)\s*[:;]\s*(\d+)")


def _git(git_dir: Path, *args: str) -> str:
    """A git command's output on the git directory `git_dir`."""
    git = shutil.which("git")
    if git is None:
        raise Missing("git is not installed: install it (Debian: apt-get install git) or pass a checkout's path")
    command = [git, "--git-dir", str(git_dir), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout  # noqa: S603 (fixed command)


def chat_files(source: Path) -> dict[int, str]:
    """The REALTALK conversations in `source` (a git directory, a checkout or a folder of Chat_*.json), by number."""
    if (source / "HEAD").is_file() and (source / "objects").is_dir():  # a bare git directory (the fetch tool's)
        names = _git(source, "ls-tree", "--name-only", "HEAD", "data/").split()
        read = {name: _git(source, "show", f"HEAD:{name}") for name in names if CHAT.fullmatch(name)}
    else:
        folder = source / "data" if (source / "data").is_dir() else source
        read = {path.name: path.read_text(encoding="utf-8") for path in folder.glob("Chat_*.json")}
    chats = {int(CHAT.fullmatch(name).group(1)): text for name, text in read.items() if CHAT.fullmatch(name)}
    if not chats:
        raise Missing(
            f"no REALTALK conversations (data/Chat_<n>_<names>.json) in {source}: fetch or clone github "
            "danny911kr/REALTALK and give its path"
        )
    return dict(sorted(chats.items()))


def locomo_date(text: str) -> str:
    """REALTALK's "29.12.2023, 22:42:04" as LoCoMo's "10:42 pm on 29 December, 2023"."""
    when = dt.datetime.strptime(text.strip(), "%d.%m.%Y, %H:%M:%S")
    return f"{when:%I:%M} {when:%p}".lower().lstrip("0") + f" on {when.day} {when:%B, %Y}"


def convert(number: int, chat: dict) -> tuple[dict, int, int]:
    """One REALTALK conversation as a LoCoMo row; with the evidence ids and the questions dropped (no such turn)."""
    conversation = {"speaker_a": chat["name"]["speaker_1"], "speaker_b": chat["name"]["speaker_2"]}
    present = set()
    for key, messages in chat.items():
        if not SESSION.fullmatch(key) or not messages:
            continue
        turns = []
        for message in messages:
            turn = {"speaker": message["speaker"], "dia_id": message["dia_id"], "text": message["clean_text"]}
            if message.get("blip_caption"):
                turn["blip_caption"] = message["blip_caption"]
            turns.append(turn)
            present.add(message["dia_id"])
        conversation[key] = turns
        conversation[f"{key}_date_time"] = locomo_date(chat.get(f"{key}_date_time") or messages[0]["date_time"])
    questions, dropped_ids, dropped_questions = [], 0, 0
    for qa in chat["qa"]:
        named = [f"D{s}:{t}" for entry in qa.get("evidence") or [] for s, t in EVIDENCE.findall(entry)]
        evidence = [dia for dia in dict.fromkeys(named) if dia in present]
        dropped_ids += len(set(named)) - len(evidence)
        if not evidence:
            dropped_questions += 1
            continue
        questions.append({**qa, "evidence": evidence})
    return {"sample_id": f"rt-{number}", "conversation": conversation, "qa": questions}, dropped_ids, dropped_questions


def sample_chat(first: str, second: str) -> dict:
    """A made-up conversation in REALTALK's layout, for --smoke where no copy of REALTALK is at hand."""

    def message(speaker: str, dia_id: str, text: str, when: str, **extra: str) -> dict:
        return {"clean_text": text, "speaker": speaker, "dia_id": dia_id, "date_time": when, "img_file": [], **extra}

    return {
        "name": {"speaker_1": first, "speaker_2": second},
        "session_1": [
            message(first, "D1:1", "I ran 5 km in the park today", "29.12.2023, 22:42:04"),
            message(second, "D1:2", "Nice! I am off to Miami on Friday", "29.12.2023, 22:45:10"),
            message(second, "D1:4", "Look at this", "29.12.2023, 22:50:00", blip_caption="a dog on a beach"),
        ],
        "session_1_date_time": "29.12.2023, 22:42:04",
        "session_2": [
            message(second, "D2:1", "Back from Miami, the beach was great", "03.01.2024, 09:05:00"),
            message(first, "D2:2", "I ran again, 7 km this time", "03.01.2024, 09:07:30"),
        ],
        "session_2_date_time": "03.01.2024, 09:05:00",
        "qa": [
            {"question": "Where did they go?", "answer": "the park, Miami", "evidence": ["D1:1; D2:1"], "category": 1},
            {"question": "When did the trip start?", "answer": "Friday", "evidence": ["D 1:2."], "category": 2},
            {"question": "Whose dog?", "answer": "unknown", "evidence": ["D1:3"], "category": 3},
            {"question": "How far did they run?", "answer": "5 km, 7 km", "evidence": ["1:1", "D2;2"], "category": 1},
        ],
    }


def smoke_source() -> Path:
    """A folder with two made-up conversations in REALTALK's layout."""
    folder = Path(tempfile.mkdtemp(prefix="realtalk-smoke-"))
    for number, (first, second) in enumerate((("Ann", "Bob"), ("Chen", "Dana")), start=1):
        path = folder / f"Chat_{number}_{first}_{second}.json"
        path.write_text(json.dumps(sample_chat(first, second)), encoding="utf-8")
    return folder


def main() -> None:
    parser = bench_parser(
        __doc__,
        smoke="the first conversation of the copy given, or without one a made-up sample in REALTALK's layout, "
        "written to a temporary file that bench/memory_recall.py then loads",
    )
    parser.add_argument(
        "source", type=Path, nargs="?", help="a copy of github danny911kr/REALTALK (git directory or checkout)"
    )
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"where to write the set (default {OUTPUT})")
    parser.add_argument("--chats", default="", help="only these conversations, e.g. 1,2,3 (default: all ten)")
    args = parser.parse_args()
    if args.smoke:
        args.output = Path(tempfile.mkdtemp(prefix="realtalk-smoke-")) / "realtalk.json"
        args.chats = args.chats or "1"
        if args.source is None:
            args.source = smoke_source()
            args.chats = ""
            print(f"no copy of REALTALK given: converting a made-up sample in its layout ({args.source})")
    elif args.source is None:
        parser.error("give the path of a copy of github danny911kr/REALTALK")
    wanted = {int(n) for n in args.chats.split(",") if n.strip()}
    rows = []
    for number, text in chat_files(args.source).items():
        if wanted and number not in wanted:
            continue
        row, dropped_ids, dropped_questions = convert(number, json.loads(text))
        rows.append(row)
        turns = sum(len(v) for k, v in row["conversation"].items() if SESSION.fullmatch(k))
        sessions = sum(1 for k in row["conversation"] if SESSION.fullmatch(k))
        print(
            f"  {row['sample_id']} ({row['conversation']['speaker_a']} & {row['conversation']['speaker_b']}): "
            f"{sessions} sessions, {turns} turns, {len(row['qa'])} questions; dropped {dropped_ids} evidence ids "
            f"naming no turn and {dropped_questions} questions left without evidence"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {args.output} ({len(rows)} conversations, {sum(len(row['qa']) for row in rows)} questions)")
    if args.smoke:
        from memory_recall import load_locomo

        samples = load_locomo(args.output)
        turns = sum(len(sample.turns) for sample in samples)
        questions = sum(len(sample.questions) for sample in samples)
        print(f"bench/memory_recall.py loads it: {len(samples)} conversations, {turns} turns, {questions} questions")
        smoke_check(["bench/memory_recall.py finds no questions in it" if not questions else ""])


if __name__ == "__main__":
    main()
