"""The README's screenshots (docs/img/*.png), taken again from scratch: run by hand, not in the test suite.

    .venv/bin/python bench/screens/take.py                 # zh-hans pages into docs/img/
    .venv/bin/python bench/screens/take.py --locale en-US --out /tmp/shots

It does what `make run` does on a temporary SQLite database (migrate, seed_demo, Daphne on a free port; no Redis,
the offline demo model), drives Debian's Chromium (/usr/bin/chromium, `apt-get install chromium fonts-noto-cjk`;
never `playwright install`) through Playwright as the demo users, walks the demo journeys and saves:

- home.png            the home page after logging in (energy tenant's admin)
- agent-form.png      Agents > New agent: the tools the tenant's packs offer (energy tenant's admin)
- agent-tokens.png    the same form's token management section
- chat-plan.png       the energy planner's PV report plan in the chat, its three steps done (energy member)
- chat-waiter.png     the restaurant's waiter taking an order with its tools (restaurant member)
- knowledge-search.png  a hybrid search of the restaurant's menu knowledge base (restaurant admin)
- eval-run.png        the waiter's sample evaluation run against its draft, every case's verdicts (restaurant admin)
- eval-compare.png    that run compared with the run of the published version, case by case (restaurant admin)

Each PNG is 1280x800 and is passed through `optipng` when it is installed (`apt-get install optipng`).

`--smoke` (what CI runs) takes agent-form.png, chat-waiter.png and knowledge-search.png into a temporary folder,
leaving docs/img alone: a form, a chat whose agent calls tools, a search (chat-plan.png, the slowest, is left to the
browser tests' planner journey).

Needs: `make install` (Playwright); Debian's chromium and fonts-noto-cjk (`make browser-deps` installs them);
optipng optional. No data files, no database or Redis of yours.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.common import SQLITE_TEMPLATE, Missing, bench_parser  # noqa: E402
from config.serving import DAPHNE_OPTIONS  # noqa: E402
from tests.browser import pages  # noqa: E402 (the browser tests' page steps and Chromium launch)
from tests.browser.pages import CHROMIUM, CHROMIUM_ARGS, start_conversation  # noqa: E402

PYTHON = ROOT / ".venv" / "bin" / "python"
DAPHNE = ROOT / ".venv" / "bin" / "daphne"
PASSWORD = "demo-pass-2026"  # noqa: S105 (seed_demo's default, the one `make run` prints)
VIEWPORT = {"width": 1280, "height": 800}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def platform_env(workdir: Path) -> dict[str, str]:
    """`make run`'s environment on a database of its own: no service from the caller's shell leaks in."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SECRET_KEY", "OPENAI_BASE_URL"}
        and not key.startswith("OPENAI_")
    }
    env.update(
        DJANGO_DEBUG="1",
        DATABASE_URL=f"sqlite:///{workdir / 'db.sqlite3'}",
        VAR_DIR=str(workdir / "var"),
        PYTHONUNBUFFERED="1",
    )
    return env


@contextmanager
def running_platform(workdir: Path) -> Iterator[str]:
    """Migrate, seed the demo tenants and serve them with Daphne; yields the base URL."""
    env = platform_env(workdir)
    if os.environ.get(SQLITE_TEMPLATE):  # a migrated database to start from (bench/smoke.py's)
        shutil.copyfile(os.environ[SQLITE_TEMPLATE], workdir / "db.sqlite3")
    for command in (["migrate", "--noinput"], ["seed_demo"]):
        print("manage.py", *command, flush=True)
        subprocess.run(  # noqa: S603 (the venv's python, fixed arguments)
            [str(PYTHON), "manage.py", *command], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL
        )
    port = free_port()
    log = open(workdir / "daphne.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(  # noqa: S603 (the venv's daphne, fixed arguments)
        [str(DAPHNE), *DAPHNE_OPTIONS, "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2):  # noqa: S310 (http, local)
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"Daphne did not start; see {workdir / 'daphne.log'}") from None
                time.sleep(0.3)
        print("serving", base, flush=True)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def log_in(page, base: str, username: str) -> None:
    pages.log_in(page, base, username, password=PASSWORD)


def say(page, text: str) -> str:
    return pages.say(page, text, timeout=60_000)


def save(page, out: Path, name: str) -> None:
    path = out / name
    page.screenshot(path=str(path))
    if shutil.which("optipng"):
        subprocess.run(["optipng", "-quiet", "-o2", "-strip", "all", str(path)], check=True)  # noqa: S603, S607
    print(f"{path} ({path.stat().st_size // 1024} KiB)", flush=True)


def scroll_to(page, selector: str, above: int = 0) -> None:
    """Scroll so that `selector` starts `above` pixels below the top of the window."""
    page.evaluate(
        "([selector, above]) => window.scrollTo(0, document.querySelector(selector).getBoundingClientRect().top"
        " + window.scrollY - above)",
        [selector, above],
    )


def shoot_home(browser, base: str, locale: str, out: Path) -> None:
    page = browser.new_context(locale=locale, viewport=VIEWPORT).new_page()
    log_in(page, base, "energy-admin")
    save(page, out, "home.png")
    page.context.close()


def shoot_agent_form(browser, base: str, locale: str, out: Path) -> None:
    page = browser.new_context(locale=locale, viewport=VIEWPORT).new_page()
    log_in(page, base, "energy-admin")
    page.goto(f"{base}/agents/new/")
    page.fill("#id_name", "光伏问答 / PV Q&A" if locale.startswith("zh") else "PV Q&A")
    page.fill("#id_description", "回答光伏发电的问题。" if locale.startswith("zh") else "Answers questions on PV.")
    page.fill("#id_system_prompt", "你是光伏顾问。" if locale.startswith("zh") else "You are a PV advisor.")
    page.check("#agent-tools input[value=pv_economics]")
    page.check("input[name=overflow_strategy][value=sliding_window]")
    page.select_option("#id_overflow_preset", label="GPT-4 (8K)")
    scroll_to(page, "#agent-tools", above=170)
    save(page, out, "agent-form.png")
    scroll_to(page, "#token-management", above=16)
    save(page, out, "agent-tokens.png")
    page.context.close()


def shoot_chat_plan(browser, base: str, locale: str, out: Path) -> None:
    page = browser.new_context(locale=locale, viewport=VIEWPORT).new_page()
    log_in(page, base, "energy-member")
    start_conversation(page, base, "能源规划师")
    say(page, "帮我生成一份光伏经济测算报告")  # the README's journey 3
    say(page, "地点是杭州余杭区，进行工商业光伏测算")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#chat-plan-steps .chat-step')]"
        ".filter(c => c.dataset.status === 'completed').length === 3",
        timeout=30_000,
    )
    page.reload()
    page.locator("#chat-plan-steps .chat-step").nth(2).wait_for()
    scroll_to(page, "#chat-plan", above=110)
    save(page, out, "chat-plan.png")
    page.context.close()


def shoot_chat_waiter(browser, base: str, locale: str, out: Path) -> None:
    page = browser.new_context(locale=locale, viewport=VIEWPORT).new_page()
    log_in(page, base, "restaurant-member")
    start_conversation(page, base, "成都小吃服务员")
    for message in ("看看菜单", "我要包子", "来3个包子", "再来两个面包", "结账"):  # the README's journey 1
        say(page, message)
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    save(page, out, "chat-waiter.png")
    page.context.close()


def shoot_knowledge_search(browser, base: str, locale: str, out: Path) -> None:
    page = browser.new_context(locale=locale, viewport=VIEWPORT).new_page()
    log_in(page, base, "restaurant-admin")
    page.goto(f"{base}/knowledge/")
    page.locator("a", has_text="huangmenji_menu").first.click()
    page.click("#search-link")
    page.fill("#id_q", "黄焖鸡")
    page.select_option("#id_mode", "hybrid")
    with page.expect_navigation():
        page.click("#search-button")
    page.locator("#search-results .hit").first.wait_for()
    save(page, out, "knowledge-search.png")
    page.context.close()


def run_dataset(page, base: str, dataset_url: str, version: str) -> str:
    """Start a run of the dataset against `version` ("draft" or a version's id) from its page, wait on the run page
    until it ends; the run's id."""
    page.goto(dataset_url)
    page.select_option("#id_version", value=version)
    with page.expect_navigation():
        page.click("#start-run")
    page.wait_for_selector("#run-progress[data-finished='1']", timeout=120_000)
    return page.url.rstrip("/").rsplit("/", 1)[1]


def shoot_evaluation(browser, base: str, locale: str, out: Path) -> None:
    """The README's "Evaluate before you publish": the waiter's sample dataset (evals/demo.py) run against the
    published version and the draft, then compared."""
    page = browser.new_context(locale=locale, viewport=VIEWPORT).new_page()
    log_in(page, base, "restaurant-admin")
    page.goto(f"{base}/agents/")
    with page.expect_navigation():
        page.locator("a", has_text="成都小吃服务员").first.click()
    with page.expect_navigation():
        page.click("#evaluation-link")
    with page.expect_navigation():
        page.locator("#datasets a", has_text="示例评测").first.click()
    dataset_url = page.url
    published = page.locator("#id_version option").nth(1).get_attribute("value")  # the newest published version
    published_run = run_dataset(page, base, dataset_url, published)
    run_dataset(page, base, dataset_url, "draft")
    scroll_to(page, "#run-progress", above=90)
    save(page, out, "eval-run.png")
    page.select_option("#compare-other", value=published_run)
    with page.expect_navigation():
        page.click("#compare-runs")
    page.locator("#compare-rows tbody tr").first.wait_for()
    save(page, out, "eval-compare.png")
    page.context.close()


SHOTS = {
    "home": shoot_home,
    "agent-form": shoot_agent_form,  # and agent-tokens.png
    "chat-plan": shoot_chat_plan,
    "chat-waiter": shoot_chat_waiter,
    "knowledge-search": shoot_knowledge_search,
    "evaluation": shoot_evaluation,  # eval-run.png and eval-compare.png
}


def main() -> None:
    parser = bench_parser(
        __doc__, description=__doc__.splitlines()[0],
        smoke="agent-form.png (with agent-tokens.png), chat-waiter.png and knowledge-search.png into a temporary "
        "folder, not docs/img",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="where the PNGs go (docs/img)")
    parser.add_argument("--locale", default="zh-CN", help="the browser's language (zh-CN or en-US)")
    parser.add_argument("--only", nargs="*", choices=sorted(SHOTS), help="take only these screenshots")
    args = parser.parse_args()
    if args.smoke:
        args.only = ["agent-form", "chat-waiter", "knowledge-search"]
        args.out = Path(tempfile.mkdtemp(prefix="screens-smoke-"))
    if not os.path.exists(CHROMIUM):
        raise Missing(
            f"Chromium is not installed ({CHROMIUM}): make browser-deps (apt-get install chromium fonts-noto-cjk)"
        )
    if not any(Path("/usr/share/fonts").rglob("NotoSansCJK*")):
        raise Missing("no CJK font: the Chinese pages would render as boxes. make browser-deps (fonts-noto-cjk)")
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="agentplat-screens-") as tmp,
        running_platform(Path(tmp)) as base,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            for name in args.only or SHOTS:
                SHOTS[name](browser, base, args.locale, args.out)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
