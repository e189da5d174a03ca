"""The chat UI driven in headless Chromium (Debian's /usr/bin/chromium, Playwright for Python, no browser download).

Each test opens a fresh page (a fresh Gradio session) on the server of the `ui_server` fixture (tests/conftest.py):
a small temp KB, a temp TRAINFIX_HOME, uploads limited to 0.01 MB. Screenshots of every step go to $TRAINFIX_TEST_ARTIFACTS (a temporary folder by default).
With TRAINFIX_UPDATE_SCREENSHOT=1 the config-upload answer is also written to docs/screenshot.png (for the README).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright
from ui_helpers import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, REPO

pytestmark = pytest.mark.slow

VIEW = {"width": 1280, "height": 1300}  # tall enough that a screenshot needs no resize (a resize re-scrolls the chat)
WAIT = 180_000  # ms: generous, the first question also loads the embedder
BOX = "#tf-input textarea"
BOT = "[data-testid='bot']"
USER = "[data-testid='user']"
PLACEHOLDERS = ["Thinking…", "Reading your files", "思考中", "正在读取"]

SEED_TITLE = "Full fine-tune loss drops to 0 within a few steps when DeepSpeed forces fp32 communication"
SEED_URL = "https://github.com/QwenLM/Qwen/issues/967"
DS_CONFIG = '{\n  "bf16": {"enabled": true},\n  "communication_data_type": "fp32",\n  "zero_optimization": {"stage": 2}\n}\n'


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, ui_server, request):
    ctx = browser.new_context(viewport=VIEW, locale="en-US")
    pg = ctx.new_page()
    pg.set_default_timeout(WAIT)
    pg.goto(ui_server.url)
    pg.wait_for_selector(BOX, timeout=WAIT)
    yield pg
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}-final.png"), full_page=True)
    ctx.close()


def shot(page: Page, name: str) -> None:
    """A screenshot with the latest exchange (the last question, then the start of its answer) in view in the chat."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    show_start(page)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def show_start(page: Page) -> None:
    last = page.locator(f"{USER}, {BOT}")
    if last.count():
        target = page.locator(USER).last if page.locator(USER).count() else last.last
        target.evaluate("el => el.scrollIntoView({block: 'start'})")
        page.evaluate("window.scrollTo(0, 0)")


def bots(page: Page) -> int:
    return page.locator(BOT).count()


def ask(page: Page, text: str = "", files: list[Path] | None = None, click: str | None = None):
    """Send a message (typed, or by clicking a button with that text) and wait until the answer replaced the placeholder."""
    before = bots(page)
    if files:
        page.locator("#tf-files input[type='file']").set_input_files([str(f) for f in files])
        for f in files:  # uploaded: the file table links to the stored copy
            expect(page.locator(f"#tf-files a[href$='/{f.name}']")).to_have_count(1, timeout=WAIT)
    if click:
        page.get_by_role("button", name=click, exact=True).click()
    else:
        page.fill(BOX, text)
        page.click("#tf-send")
    page.wait_for_function(
        """([sel, n, marks]) => {
            const b = document.querySelectorAll(sel);
            if (b.length <= n) return false;
            const t = b[b.length - 1].innerText;
            return t.trim().length > 0 && !marks.some(m => t.includes(m));
        }""",
        arg=[BOT, before, PLACEHOLDERS],
        timeout=WAIT,
    )
    return page.locator(BOT).last


def titles(answer) -> list[str]:
    return [re.sub(r"^\d+\.\s*", "", t.strip()) for t in answer.locator("h3").all_inner_texts()]


def first_card(answer) -> str:
    text = answer.inner_text()
    hs = answer.locator("h3").all_inner_texts()
    start = text.find(hs[0])
    end = text.find(hs[1], start + 1) if len(hs) > 1 else len(text)
    return text[start:end]


def rows(db: Path, kind: str) -> list[tuple]:
    """Feedback rows of one kind, polled: the like/feedback events reach the server asynchronously."""
    deadline = time.time() + 60
    while True:
        found: list[tuple] = []
        if db.exists():
            con = sqlite3.connect(str(db))
            try:
                found = con.execute(
                    "select kind, case_id, question, answer, attachments, channel from feedback where kind = ?", (kind,)
                ).fetchall()
            finally:
                con.close()
        if found or time.time() > deadline:
            return found
        time.sleep(0.5)


def test_english_question_top_cause_and_citation(page: Page):
    answer = ask(page, "Loss drops to 0 after a few steps in my Qwen 7B full fine-tune with DeepSpeed, grad norm was huge first")
    shot(page, "01-english-answer")
    assert titles(answer)[0] == SEED_TITLE
    link = answer.locator("a", has_text="[1]").first
    expect(link).to_have_attribute("href", SEED_URL)
    expect(link).to_have_attribute("target", "_blank")
    # the answer is in English, and so is the interface; its first line is the verdict (a text-only match is
    # confident only past the threshold calibrated on real threads, so either verdict is right here)
    expect(answer).to_contain_text(re.compile(r"Most likely:|Not confident:"))
    expect(answer).to_contain_text("Why it matched")
    expect(page.locator("#tf-send")).to_have_text("Send")


def test_config_upload_evidence_then_follow_up_reranks(page: Page, tmp_path: Path):
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(DS_CONFIG, encoding="utf-8")
    answer = ask(page, "training broke, please help", files=[cfg])
    shot(page, "02-config-evidence")
    expect(answer).to_contain_text("ds_config.json:3")  # the evidence line: file and line of communication_data_type
    expect(answer).to_contain_text('"communication_data_type": "fp32"')
    expect(answer).to_contain_text("What I read from your files")
    user = page.locator(USER).last
    expect(user).to_contain_text("ds_config.json")
    before = titles(answer)
    assert before[0] == SEED_TITLE
    if os.environ.get("TRAINFIX_UPDATE_SCREENSHOT") == "1":  # the README's picture of a real answer, 1280x900
        page.set_viewport_size({"width": 1280, "height": 900})
        page.wait_for_timeout(1000)  # let the chat settle after the resize, then show the question and the answer's start
        show_start(page)
        page.screenshot(path=str(REPO / "docs" / "screenshot.png"))
        page.set_viewport_size(VIEW)

    # the follow-up is diagnosed with the earlier message and the config: the tried fix demotes the cause
    after_answer = ask(page, "I already removed communication_data_type, still zero")
    shot(page, "03-follow-up")
    after = titles(after_answer)
    assert after, "the follow-up got no cause cards"
    assert after[0] != before[0] or "Demoted" in first_card(after_answer), (before, after)


def test_chinese_question_gets_chinese_answer_and_interface(page: Page):
    answer = ask(page, click="全量微调几步之后 loss 变成 0 了，梯度范数先变得很大，怎么回事？")
    shot(page, "04-chinese")
    expect(answer).to_contain_text("可能的原因")
    assert re.search(r"[\u4e00-\u9fff]{4,}", titles(answer)[0])
    expect(page.locator("#tf-send")).to_have_text("发送")
    expect(page.locator("#tf-new")).to_have_text("新对话")


def test_clarifying_question_quick_reply(page: Page):
    """Close top causes + an unknown separating fact -> the question with quick replies; a click sends the option."""
    ask(page, "out of memory")
    shot(page, "11-clarify")
    row = page.locator("#tf-quick")
    expect(row).to_be_visible()
    option = row.locator("button.tf-quick-reply").first
    text = option.inner_text().strip()
    assert text
    answer = ask(page, click=text)
    shot(page, "12-quick-reply")
    expect(page.locator(USER).last).to_contain_text(text)
    assert titles(answer)


def test_feedback_rows_in_sqlite(page: Page, ui_server, tmp_path: Path):
    db = ui_server.state.settings.feedback_db
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(DS_CONFIG.replace("{\n", '{\n  "hf_token": "hf_abcdefghijklmnopqrstuvwxyz123456",\n', 1), encoding="utf-8")
    answer = ask(page, "loss is 0 after 10 steps", files=[cfg])
    answer.hover()
    page.locator("#tf-chat button[aria-label='Like']").last.click()
    expect(page.locator("#tf-feedback-status")).to_contain_text("Thanks", timeout=WAIT)
    shot(page, "05-feedback-like")
    up = rows(db, "up")
    assert up, f"no 'up' row in {db}"
    kind, case_id, question, ans, atts, channel = up[-1]
    assert channel == "ui" and question == "loss is 0 after 10 steps"
    assert json.loads(ans)["causes"][0]["case_id"] == "deepspeed-comm-dtype-fp32-loss-zero"
    stored = json.loads(atts)
    assert "ds_config.json" in stored and "hf_abcdefghijklmnopqrstuvwxyz123456" not in stored["ds_config.json"]

    # "this fixed it" on the top cause (the dropdown lists the shown cases, the first preselected)
    expect(page.locator("#tf-fixed-case input")).to_have_value(re.compile(r"1\. Full fine-tune loss drops to 0"))
    page.click("#tf-fixed")
    expect(page.locator("#tf-feedback-status")).to_contain_text("fixed", timeout=WAIT)
    shot(page, "06-feedback-fixed")
    fixed = rows(db, "fixed")
    assert fixed and fixed[-1][1] == "deepspeed-comm-dtype-fp32-loss-zero" and fixed[-1][5] == "ui"


def test_bad_input_is_reported_and_the_chat_stays_usable(page: Page, tmp_path: Path):
    big = tmp_path / "big.log"
    big.write_text("step 1 loss 2.31\n" * 2000, encoding="utf-8")  # ~34 KB, over the 0.01 MB test limit
    answer = ask(page, "Loss drops to 0 after a few steps of full fine-tuning", files=[big])
    shot(page, "07-oversized")
    expect(answer).to_contain_text("big.log")
    expect(answer).to_contain_text("over the 0.01 MB upload limit")
    expect(answer).to_contain_text("Full fine-tune loss drops to 0")  # the rest of the turn was still answered

    binary = tmp_path / "weights.bin"
    binary.write_bytes(b"\x00\x01\x02PK\x03\x04" * 100)
    notes = tmp_path / "notes.txt"
    notes.write_text("just some words about my weekend\n", encoding="utf-8")
    answer = ask(page, "and what about these files?", files=[binary, notes])
    shot(page, "08-binary-unknown")
    expect(answer).to_contain_text("weights.bin: looks like a binary file")
    expect(answer).to_contain_text("notes.txt")

    answer = ask(page, "")
    shot(page, "09-empty")
    expect(answer).to_contain_text("The message is empty")

    answer = ask(page, "grad norm jumps to the thousands, then loss is 0")
    shot(page, "10-still-usable")
    assert titles(answer), "the conversation is not usable after bad input"

    page.click("#tf-new")
    expect(page.locator(BOT)).to_have_count(0, timeout=WAIT)
