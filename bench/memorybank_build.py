"""Build the user–assistant long-memory sets for bench/memory_recall.py from MemoryBank-SiliconFriend (issue 38): an
English set and a Chinese set of people talking with an AI companion over ten days, with probing questions.

    .venv/bin/python bench/memorybank_build.py /work/.mirror/zhongwanjun+MemoryBank-SiliconFriend/repo
    .venv/bin/python bench/memory_recall.py --events 0 --per-sample --set memorybank-en
    MEMORY_EMBEDDER=local_multilingual .venv/bin/python bench/memory_recall.py --events 0 --per-sample \\
        --set memorybank-zh

MemoryBank-SiliconFriend (github zhongwanjun/MemoryBank-SiliconFriend, Zhong et al. 2023, arXiv 2305.10250, MIT
licence) holds in eval_data/{en,cn}/ fifteen users' histories with an AI companion (memory_bank_<lang>.json: per
user, per day 2023-04-27..05-06, the exchanges {query, response}) and 100 probing questions per language
(probing_questions_<lang>.jsonl: per user, ordinary chat questions about earlier facts, "Which novel did you
recommend to me?"). The two languages are the same fifteen histories (the English a translation), so a constant
tuned on one is not checked by the other. The data stays outside the repository (the licence would allow shipping
it; nothing needs to): this script reads the four files from a copy and writes the sets in LoCoMo's shape (what
memory_recall.load_locomo reads) to ~/.cache/agentplat-memory-bench/memorybank_{en,zh}.json.

The questions carry neither answers nor evidence. The evidence is derived by a rule, written here and checkable by
reading a question beside its user's history (`--show` prints each question, its anchor and its evidence):
  1. a question that names a day ("May 2nd", "5月2日", "4月27号") looks only at that day's messages;
  2. its content terms (English: lower-case words of 3+ letters outside STOP_EN, a final "s" dropped; Chinese: jieba's
     words of 2+ characters outside STOP_ZH, and Latin words or numbers) are counted in the user's messages (both
     roles) it looks at: a term's count is the number of messages that contain it;
  3. each message scores the sum of log(1 + messages / count) over the question's terms it holds; the evidence is
     the best message and every message scoring at least SHARE_OF_BEST (0.8) of it; the **anchors** are the
     question's terms the evidence holds. A question is dropped (the script counts them) when its evidence would be
     more than MAX_MESSAGES (3) messages, or when the terms all evidence messages share are neither two or more nor
     one held by at most MAX_MESSAGES messages (nothing specific ties it to a message).
The rule is lexical: it finds the message that shares the question's rarest words, so it favours keyword search
(bm25) over the vectors; a question about a topic whose words the history does not repeat is dropped rather than
labelled. Categories for the bench's rows: a question naming a day is 2 (temporal), one whose evidence spans two or
more days 1 (multi-hop), the rest 4 (single-hop).

Each user is one conversation of the set (`mb-en-01`..`mb-en-15`, `mb-zh-01`..): the user speaks first each day,
the companion ("AI companion" / "AI伴侣") answers; dia_ids D<day>:<n> count the day's messages. Split: the users at
odd places (01, 03, .., 15) are the **dev** half (to tune on), the others the **check** half (the `split` field of
each row; bench/memory_recall.py reports both halves).

Needs: `make install` (jieba, git); a copy of github zhongwanjun/MemoryBank-SiliconFriend (the `fetch` tool's git
directory, a checkout, or a folder holding eval_data/). CI has no copy: there `--smoke` converts the committed
made-up sample bench/data/memorybank_sample/ (in MemoryBank's layout, written for this project), says so, and checks
that bench/memory_recall.py loads the result.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import jieba

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Missing, bench_parser, smoke_check

CACHE = Path.home() / ".cache" / "agentplat-memory-bench"
SAMPLE = Path(__file__).resolve().parent / "data" / "memorybank_sample"
MAX_MESSAGES = 3  # evidence of more messages than this says nothing specific: the question is dropped
SHARE_OF_BEST = 0.8  # a message scoring this share of the best one is evidence too
YEAR = 2023  # MemoryBank's histories run from 2023-04-27 to 2023-05-06


class Language(StrEnum):
    """A language of MemoryBank: its folder in eval_data/ and the set's name in bench/memory_recall.py --set."""

    EN = "en"
    ZH = "cn"

    @property
    def set_name(self) -> str:
        return "memorybank-en" if self is Language.EN else "memorybank-zh"

    @property
    def companion(self) -> str:
        return "AI companion" if self is Language.EN else "AI伴侣"


def output_path(language: Language, folder: Path = CACHE) -> Path:
    """Where the built set is written (and where bench/memory_recall.py --set reads it)."""
    return folder / f"{language.set_name.replace('-', '_')}.json"


STOP_EN = frozenset(
    """about after again all also and any are ask asked back been before being but can could day days did does doing
    done for from get got had has have her hers him his how into its just know last let like liked made make many may
    me mentioned mine more most much my myself not now once one our out over recently remember said say shared she
    should some something tell than that the their them then there these they thing things this those time told too
    try tried use used very want was way were what when where which who whom why will with would you your yours
    before once ago few some kind type types name named content""".split()  # noqa: SIM905 (a word list reads better as text)
)
STOP_ZH = frozenset(
    """我们 你们 他们 她们 什么 哪些 哪个 哪里 哪儿 为什么 怎么 怎样 如何 是否 是不是 对吗 还记得 记得 记住 曾经 曾
    以前 之前 最近 当时 这天 那天 那时 时候 一些 一下 一个 一次 一起 名字 内容 类型 哪种 什么样 这个 那个 这些 那些
    提到 提到过 提过 分享 分享过 告诉 告诉过 说过 问过 问 问你 为了 因为 所以 关于 有关 相关 可以 可能 应该 的话 谁
    哪位 多久 多少 几个 还有 而且 或者 以及 一直 已经 现在 今天 昨天 明天 方法 办法 东西 事情 地方 我的 你的""".split()  # noqa: SIM905 (a word list reads better as text)
)
# "May 2nd", "April 27th"; "5月2日", "4月27号".
MONTHS = {name: number for number, name in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november",
     "december"), start=1)}  # fmt: skip
DAY_EN = re.compile(r"\b(" + "|".join(MONTHS) + r")\s+(\d{1,2})(?:st|nd|rd|th)?\b", re.IGNORECASE)
DAY_ZH = re.compile(r"(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]")
WORD_EN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
LATIN = re.compile(r"[A-Za-z0-9]+")
CJK = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class Message:
    dia_id: str
    day: str  # "2023-04-27"
    speaker: str
    text: str


def terms(text: str, language: Language) -> frozenset[str]:
    """The content terms of a text (rule step 2)."""
    if language is Language.EN:
        words = (word.removesuffix("'s") for word in WORD_EN.findall(text.lower()))
        return frozenset(w.removesuffix("s") if len(w) > 3 else w for w in words if len(w) >= 3 and w not in STOP_EN)
    found = set()
    for word in jieba.lcut(text):
        word = word.strip()
        if len(word) >= 2 and CJK.search(word) and word not in STOP_ZH:
            found.add(word)
        elif LATIN.fullmatch(word):
            found.add(word.lower())
    return frozenset(found)


def named_day(question: str, language: Language) -> str | None:
    """The day a question names, as "2023-05-02" (rule step 1), or None."""
    if language is Language.EN:
        match = DAY_EN.search(question)
        month, day = (MONTHS[match.group(1).lower()], int(match.group(2))) if match else (0, 0)
    else:
        match = DAY_ZH.search(question)
        month, day = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    try:
        return dt.date(YEAR, month, day).isoformat() if match else None
    except ValueError:
        return None


def evidence_for(question: str, messages: list[Message], language: Language, user: str) -> tuple[list[str], str]:
    """(the evidence dia_ids, the anchor terms) of a question by the rule in this module's docstring; no evidence
    when no message holds the question's terms specifically enough."""
    day = named_day(question, language)
    pool = [m for m in messages if m.day == day] if day and any(m.day == day for m in messages) else messages
    asked = terms(question, language) - terms(user, language)
    held = [(message, terms(message.text, language)) for message in pool]
    counts = {term: sum(term in words for _, words in held) for term in asked}
    weight = {term: math.log(1 + len(held) / count) for term, count in counts.items() if count}
    scored = [(sum(weight.get(term, 0.0) for term in words & asked), message, words) for message, words in held]
    best = max((score for score, _, _ in scored), default=0.0)
    top = [(message, words) for score, message, words in scored if best and score >= SHARE_OF_BEST * best]
    shared = set.intersection(*(set(words & asked) for _, words in top)) if top else set()
    specific = any(counts[term] <= MAX_MESSAGES for term in shared) or len(shared) >= 2
    if not top or len(top) > MAX_MESSAGES or not specific:
        return [], " ".join(sorted(shared))
    anchors = sorted({term for _, words in top for term in words & asked})
    return [message.dia_id for message, _ in top], " ".join(anchors)


def category_of(question: str, evidence: list[str], language: Language) -> int:
    """LoCoMo's category numbers for the bench's rows: 2 names a day, 1 spans days, 4 otherwise."""
    if named_day(question, language):
        return 2
    return 1 if len({dia.split(":")[0] for dia in evidence}) > 1 else 4


def locomo_date(day: str) -> str:
    """ "2023-04-27" as LoCoMo's session time, "9:00 am on 27 April, 2023" (the day's exchanges carry no time)."""
    when = dt.date.fromisoformat(day)
    return f"9:00 am on {when.day} {when:%B, %Y}"


def convert(number: int, user: dict, questions: list[str], language: Language) -> tuple[dict, list[dict], int]:
    """One MemoryBank user as a LoCoMo row; with the labelled questions (for --show) and the number dropped."""
    name = user["name"].strip()
    conversation: dict = {"speaker_a": name, "speaker_b": language.companion}
    messages: list[Message] = []
    for session, (day, exchanges) in enumerate(sorted(user["history"].items()), start=1):
        turns = []
        for exchange in exchanges:
            for speaker, text in ((name, exchange.get("query")), (language.companion, exchange.get("response"))):
                if text and text.strip():
                    dia_id = f"D{session}:{len(turns) + 1}"
                    turns.append({"speaker": speaker, "dia_id": dia_id, "text": text.strip()})
                    messages.append(Message(dia_id, day, speaker, text.strip()))
        if turns:
            conversation[f"session_{session}"] = turns
            conversation[f"session_{session}_date_time"] = locomo_date(day)
    labelled, dropped = [], 0
    for question in questions:
        evidence, anchor = evidence_for(question, messages, language, name)
        if not evidence:
            dropped += 1
            continue
        category = category_of(question, evidence, language)
        labelled.append({"question": question, "answer": "", "evidence": evidence, "category": category,
                         "anchor": anchor})  # fmt: skip
    prefix = "mb-en" if language is Language.EN else "mb-zh"
    split = "dev" if number % 2 else "check"
    row = {"sample_id": f"{prefix}-{number:02d}", "split": split, "conversation": conversation, "qa": labelled}
    return row, labelled, dropped


def _git(git_dir: Path, *args: str) -> str:
    git = shutil.which("git")
    if git is None:
        raise Missing("git is not installed: install it (Debian: apt-get install git) or pass a checkout's path")
    command = [git, "--git-dir", str(git_dir), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout  # noqa: S603 (fixed command)


def read_source(source: Path, language: Language) -> tuple[dict, dict[str, list[str]]]:
    """(users by name, probing questions by user name) of one language from a copy of the repository."""
    names = (
        f"eval_data/{language}/memory_bank_{language}.json",
        f"eval_data/{language}/probing_questions_{language}.jsonl",
    )
    if (source / "HEAD").is_file() and (source / "objects").is_dir():  # a bare git directory (the fetch tool's)
        texts = [_git(source, "show", f"HEAD:{name}") for name in names]
    else:
        paths = [source / name for name in names]
        if not all(path.is_file() for path in paths):
            raise Missing(
                f"no MemoryBank files ({', '.join(names)}) in {source}: fetch or clone github "
                "zhongwanjun/MemoryBank-SiliconFriend and give its path"
            )
        texts = [path.read_text(encoding="utf-8") for path in paths]
    users = json.loads(texts[0])
    questions: dict[str, list[str]] = {}
    for line in texts[1].splitlines():
        if line.strip():
            questions.update({name.strip(): asked for name, asked in json.loads(line).items()})
    return users, questions


def build(source: Path, language: Language, output: Path, *, show: bool = False) -> list[dict]:
    """The set of one language written to `output`; returns its rows."""
    users, questions = read_source(source, language)
    rows = []
    for number, (key, user) in enumerate(users.items(), start=1):
        name = (user.get("name") or key).strip()
        row, labelled, dropped = convert(number, {**user, "name": name}, questions.get(name, []), language)
        rows.append(row)
        turns = sum(len(v) for k, v in row["conversation"].items() if re.fullmatch(r"session_\d+", k))
        print(f"  {row['sample_id']} {name} ({row['split']}): {turns} messages, {len(labelled)} questions "
              f"labelled, {dropped} dropped (no specific anchor)")  # fmt: skip
        if show:
            _show(row, labelled)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(rows, ensure_ascii=False, indent=0), encoding="utf-8")
    asked = sum(len(row["qa"]) for row in rows)
    print(f"wrote {output} ({len(rows)} conversations, {asked} questions)")
    return rows


def _show(row: dict, labelled: Iterable[dict]) -> None:
    text = {t["dia_id"]: t["text"] for k, v in row["conversation"].items() if k.startswith("session_")
            and isinstance(v, list) for t in v}  # fmt: skip
    for qa in labelled:
        print(f"    Q {qa['question']}  [anchor: {qa['anchor']}; category {qa['category']}]")
        for dia in qa["evidence"]:
            print(f"      {dia}: {text[dia][:150]}")


def main() -> None:
    parser = bench_parser(
        __doc__,
        smoke="the committed made-up sample bench/data/memorybank_sample/ (or the copy given), written to a "
        "temporary folder that bench/memory_recall.py then loads",
    )
    parser.add_argument("source", type=Path, nargs="?", help="a copy of github zhongwanjun/MemoryBank-SiliconFriend")
    parser.add_argument("--output-dir", type=Path, default=CACHE, help=f"where to write the sets (default {CACHE})")
    parser.add_argument("--show", action="store_true", help="print each question with its anchor and evidence")
    args = parser.parse_args()
    if args.smoke:
        args.output_dir = Path(tempfile.mkdtemp(prefix="memorybank-smoke-"))
        if args.source is None:
            args.source = SAMPLE
            print(f"no copy of MemoryBank given: converting the committed made-up sample ({SAMPLE})")
    elif args.source is None:
        parser.error("give the path of a copy of github zhongwanjun/MemoryBank-SiliconFriend")
    failures = []
    for language in Language:
        path = output_path(language, args.output_dir)
        build(args.source, language, path, show=args.show)
        if args.smoke:
            failures.append(_loads(path))
    smoke_check(failures)


def _loads(path: Path) -> str:
    """Checks that bench/memory_recall.py reads a built set; the failure said, or ""."""
    from memory_recall import load_locomo  # the bench, loaded only to check what it reads

    samples = load_locomo(path)
    turns = sum(len(sample.turns) for sample in samples)
    questions = sum(len(sample.questions) for sample in samples)
    print(f"bench/memory_recall.py loads {path.name}: {len(samples)} conversations, {turns} turns, {questions} "
          "questions")  # fmt: skip
    return f"bench/memory_recall.py finds no questions in {path.name}" if not questions else ""


if __name__ == "__main__":
    main()
