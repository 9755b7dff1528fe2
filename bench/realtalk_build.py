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
git directory, a checkout, or a folder holding the Chat_*.json files).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Missing, bench_parser

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


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("source", type=Path, help="a copy of github danny911kr/REALTALK (git directory or checkout)")
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"where to write the set (default {OUTPUT})")
    parser.add_argument("--chats", default="", help="only these conversations, e.g. 1,2,3 (default: all ten)")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
