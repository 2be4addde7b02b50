"""``opsgate demo`` in a real browser: Debian's Chromium, headless, driven by Playwright, on the
sandbox page of a demo started as a subprocess on free ports. People type a mention, approve or
reject the plan as different people, pin a message, and switch chaos on; the case card follows
the case in place, and the case's state and timeline in the side panel (and opsgate's REST API)
must show what happened, once.

Screenshots go to ``artifacts/`` (gitignored); ``docs/img/sandbox.png`` is one of them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright import sync_api
from playwright.sync_api import expect

from bot.sandbox.serving import free_port
from tests.support.processes import clean_env, command

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts"
START_TIMEOUT_S = 30.0
STEP_TIMEOUT_MS = 20_000

# One worker runs the whole file: its tests share the module's demo and browser.
pytestmark = [pytest.mark.timeout(90)]


@dataclass(frozen=True)
class Demo:
    page_url: str
    api_url: str


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    where = tmp_path_factory.mktemp("demo")
    port, api_port = free_port(), free_port()
    log = (where / "demo.log").open("wb")
    process = subprocess.Popen(
        command("demo", "--port", str(port), "--api-port", str(api_port)),
        cwd=where, env=clean_env(), stdout=log, stderr=subprocess.STDOUT)
    running = Demo(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{api_port}")
    try:
        _wait_listening(running, process, where / "demo.log")
        yield running
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _wait_listening(demo: Demo, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"opsgate demo exited:\n{log.read_text()}"
        try:
            if httpx.get(f"{demo.api_url}/healthz", timeout=1).status_code == 200 and \
                    httpx.get(demo.page_url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"opsgate demo did not listen in time:\n{log.read_text()}")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=["--headless", "--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser, demo: Demo):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(STEP_TIMEOUT_MS)
    expect.set_options(timeout=STEP_TIMEOUT_MS)
    opened.goto(demo.page_url)
    expect(opened.locator("#who option")).to_have_count(3)
    yield opened
    context.close()


# -- what a person does on the page ----------------------------------------------------------


def be(page, name: str) -> None:
    value = page.locator("#who option", has_text=name).get_attribute("value")
    page.select_option("#who", value)


def mention(page, title: str) -> None:
    """Riley mentions the bot in the channel; the page opens the new message's thread."""
    be(page, "riley")
    page.fill("#channel-input", f"@opsgate {title}")
    page.press("#channel-input", "Enter")
    expect(page.locator("#thread .message").first).to_contain_text(title)
    expect(page.locator("#thread").get_by_role("button", name="Approve")).to_be_visible()
    expect(page.locator("#case-summary .case-title")).to_have_text(title)
    expect(page.locator("#case-status")).to_have_text("WAIT_GATE")


def click_in_thread(page, label: str) -> None:
    page.locator("#thread").get_by_role("button", name=label).click()


def closed_or_why(page, header) -> None:
    """The card's header reaches CLOSED; if not, the failure says what the page showed (the
    case's status, its timeline, the thread), to tell a click that was lost from a card that
    was not updated."""
    try:
        expect(header).to_contain_text("CLOSED")
    except AssertionError as failure:
        seen = {where: page.locator(where).inner_text()
                for where in ("#case-status", "#timeline", "#thread")}
        raise AssertionError(f"{failure}\nthe page showed: {seen}") from failure


def case_id_shown(page) -> str:
    return page.locator("#case-summary .muted").inner_text().strip()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


# -- the stories -----------------------------------------------------------------------------


def test_mention_then_approval_closes_the_case(page):
    mention(page, "checkout p95 is over 2 s")
    plan = page.locator("#thread .message", has=page.get_by_role("button", name="Approve"))
    # what will happen, in words; people by name; the JSON one click away
    expect(plan).to_contain_text("Verify (after the change)")
    expect(plan).to_contain_text(re.compile(r"Steps\s*1\. [A-Z][a-z]"))  # not `k8s.rollout`
    expect(plan).to_contain_text(re.compile(r"Verify \(after the change\)\s*• \S+ below"))
    expect(plan).to_contain_text("approvers: @alice")  # a mention Slack names
    expect(plan).not_to_contain_text('"action"')
    expect(plan).not_to_contain_text("U0ALICE")
    shot(page, "sandbox")
    be(page, "alice")
    plan.get_by_role("button", name="Details").click()
    modal = page.locator("#modal")
    expect(modal).to_be_visible()
    expect(modal).to_contain_text('"action":')
    expect(page.locator("#modal-submit")).to_be_hidden()
    shot(page, "sandbox-details")
    page.click("#modal-close")
    expect(modal).to_be_hidden()
    click_in_thread(page, "Approve")
    expect(page.locator("#case-status")).to_have_text("CLOSED")
    thread = page.locator("#thread")
    expect(thread).to_contain_text("Approved")
    expect(thread).to_contain_text(
        "is CLOSED: stand-in readings (OPSGATE_STATIC_METRICS): all 2 checks passed")
    expect(thread.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.locator("#timeline [data-event=verify_pass]")).to_have_count(1)
    shot(page, "sandbox-closed")


def test_the_investigation_is_a_plan_of_looks_and_its_findings_follow(page):
    """What opsgate looked at is one message drawn as Slack's plan: a task per look, each
    complete with its gist or errored with its reason; then the findings, with the analyst's
    numbers and what could not be read (issue 45)."""
    mention(page, "checkout 5xx errors since the deploy")
    thread = page.locator("#thread")
    plan = thread.locator(".bk-plan")
    expect(plan).to_have_count(1)
    expect(plan.locator(".bk-plan-title")).to_have_text("What opsgate looked at")
    tasks = plan.locator(".bk-task")
    expect(tasks.first).to_be_visible()
    expect(plan.locator(".bk-task-pending, .bk-task-in_progress")).to_have_count(0)
    expect(plan.locator(".bk-task-output")).to_have_count(tasks.count())  # each says what it read
    expect(plan.locator(".bk-task-complete", has_text="Reading what changed in checkout")
           ).to_contain_text("deploy v1.8.0 of checkout by ci")
    expect(plan.locator(".bk-task-error", has_text="Listing the metrics of checkout")
           ).to_contain_text("no Prometheus is configured")
    findings = thread.locator(".message", has_text="Findings for case")
    expect(findings).to_have_count(1)
    expect(findings).to_contain_text(re.compile(r"http_5xx_ratio 0\.19% before → 7\.41% now"))
    expect(findings).to_contain_text("Not readable")
    plan.scroll_into_view_if_needed()
    shot(page, "sandbox-investigation")


STAGES = ["NEW", "ANALYZING", "PLANNING", "WAIT_GATE", "EXECUTING", "VERIFYING", "CLOSED"]
WATCH_THE_CARD = """() => {
  window.cardStages = [];
  const look = () => {
    const head = document.querySelector('#thread [data-block-id="case_card"]');
    const text = head ? head.textContent.trim() : null;
    if (text && window.cardStages[window.cardStages.length - 1] !== text) {
      window.cardStages.push(text);
    }
  };
  new MutationObserver(look).observe(document.getElementById("thread"),
                                     {subtree: true, childList: true, characterData: true});
  look();
}"""


def test_the_case_card_follows_the_case_in_place_and_a_pin_joins_it(page):
    title = "orders p95 is over 3 s"
    mention(page, title)
    page.evaluate(WATCH_THE_CARD)  # every header the card shows from now on
    card = page.locator("#thread .message", has=page.locator('[data-block-id="case_card"]'))
    expect(card).to_have_count(1)
    part = lambda name: card.locator(f'[data-block-id="case_card_{name}"]')  # noqa: E731
    expect(card.locator('[data-block-id="case_card"]')).to_contain_text("WAIT_GATE")
    expect(part("plan")).to_contain_text("Waiting at the gate — approvals 0 of 1")
    expect(part("steps")).to_contain_text("· 1.")
    ts = card.get_attribute("data-ts")

    be(page, "bob")  # anyone may pin: bob pins riley's message, the thread's root
    root = page.locator("#thread .message").first
    root.locator(".pin").click()
    expect(root.locator('.reaction[data-reaction="pushpin"]')).to_have_text("📌 1")
    expect(part("pins")).to_contain_text(title)
    expect(page.locator("#timeline [data-event=message_pinned]")).to_have_count(1)

    be(page, "alice")
    click_in_thread(page, "Approve")
    closed_or_why(page, card.locator('[data-block-id="case_card"]'))
    expect(part("plan")).to_contain_text("Approved by @alice")
    expect(part("steps")).to_contain_text(re.compile(r"✓ 1\. [A-Z].* — done"))
    expect(part("verify")).to_contain_text("Held")
    expect(part("outcome")).to_contain_text("CLOSED at")
    expect(card).to_have_attribute("data-ts", ts or "")  # the same message, updated in place
    expect(card.locator(".meta")).to_contain_text("(edited)")
    shot(page, "sandbox-card")
    stages = [text.split(" ")[1] for text in page.evaluate("window.cardStages")]
    assert [STAGES.index(s) for s in stages] == sorted(STAGES.index(s) for s in stages), stages
    assert {"WAIT_GATE", "VERIFYING", "CLOSED"} <= set(stages), stages


CHECKOUT_ROLLBACK = ("Plan: Roll checkout back to revision 11 "
                     "(registry.example.com/shop/checkout:v1.7.3) from revision 12")


def test_the_checkout_incident_gets_a_rollback_of_the_demo_deployment(page):
    """The demo's catalog names checkout (deployment shop/checkout), its recorded world says
    revision 12 (v1.8.0) replaced revision 11 (v1.7.3) minutes ago, and the change store holds
    that deploy: the plan rolls shop/checkout back to revision 11, not ``prod/app``, and the
    agent says why, citing the deploy it found (the embedded default reads no metrics)."""
    mention(page, "checkout p95 is over 2 s since the 14:02 deploy")
    thread = page.locator("#thread")
    expect(thread).to_contain_text(re.compile(
        r"recent_changes: deploy of checkout v1\.8\.0 by ci at \d\d:\d\d, \d+ min before the "
        r"case opened"))
    plan = thread.locator(".message", has=page.get_by_role("button", name="Approve"))
    expect(plan.locator(".bk-header")).to_have_text(CHECKOUT_ROLLBACK)
    expect(plan).to_contain_text("Set the image of deployment shop/checkout (container ")
    expect(plan).to_contain_text(") to registry.example.com/shop/checkout:v1.7.3")
    expect(plan).not_to_contain_text('"deployment"')
    expect(plan).to_contain_text("Touches checkout")
    expect(plan).not_to_contain_text("app:last-known-good")
    card = thread.locator(".message", has=page.locator('[data-block-id="case_card"]'))
    summary = card.locator('[data-block-id="case_card_summary"]')
    expect(summary).to_contain_text(re.compile(r"Last change \d\d:\d\d checkout v1\.8\.0 by ci"))
    expect(page.locator("#timeline [data-event=components_named]")).to_have_count(1)
    shot(page, "sandbox-checkout-rollback")
    be(page, "alice")
    click_in_thread(page, "Approve")
    closed_or_why(page, card.locator('[data-block-id="case_card"]'))
    steps = card.locator('[data-block-id="case_card_steps"]')
    expect(steps).to_contain_text(re.compile(
        r"✓ 1\. Set the image of deployment shop/checkout .* — done"))


def test_rejection_with_a_reason_parks_the_case(page):
    mention(page, "disk filling on db-2")
    be(page, "alice")
    click_in_thread(page, "Reject")
    modal = page.locator("#modal")
    expect(modal).to_be_visible()
    modal.locator("textarea").fill("wrong service: db-2 is a replica")
    shot(page, "sandbox-reject-modal")
    page.click("#modal-submit")
    expect(modal).to_be_hidden()
    expect(page.locator("#case-status")).to_have_text("PARKED")
    expect(page.locator("#thread")).to_contain_text("wrong service: db-2 is a replica")
    expect(page.locator("#thread").get_by_role("button", name="Reject")).to_have_count(0)


def test_a_click_by_someone_not_on_the_approver_list_is_refused(page, demo):
    mention(page, "5xx on the payments gateway")
    be(page, "bob")
    click_in_thread(page, "Approve")
    refusal = page.locator("#thread .message.ephemeral")
    expect(refusal).to_contain_text("@bob is not an approver (@alice may approve)")  # names
    shot(page, "sandbox-refused")
    case = httpx.get(f"{demo.api_url}/case/{case_id_shown(page)}").json()["data"]
    assert case["status"] == "WAIT_GATE" and case["version"] == 3
    be(page, "alice")  # the refusal is bob's alone to see
    expect(page.locator("#thread .message.ephemeral")).to_have_count(0)
    expect(page.locator("#thread").get_by_role("button", name="Approve")).to_be_visible()


def chaos_is(demo: Demo, on: bool) -> bool:
    return bool(httpx.get(f"{demo.page_url}/sandbox/state", params={"user": ""}).json()["chaos"]
                is on)


def test_with_chaos_on_nothing_happens_twice(page, demo):
    page.check("#chaos")
    try:
        deadline = time.monotonic() + 10
        while not chaos_is(demo, True):
            assert time.monotonic() < deadline, "the chaos switch did not reach the sandbox"
            time.sleep(0.05)
        mention(page, "queue lag on orders")
        be(page, "alice")
        click_in_thread(page, "Approve")
        expect(page.locator("#case-status")).to_have_text("CLOSED")
        deliveries = page.locator("#deliveries")
        expect(deliveries).to_contain_text("retry 3")
        expect(deliveries).to_contain_text("copy 2")
        shot(page, "sandbox-chaos")
    finally:
        page.uncheck("#chaos")
    case_id = case_id_shown(page)
    rows = httpx.get(f"{demo.api_url}/case/{case_id}/timeline").json()["data"]
    # Two readings of the verify block may say the same words: the reading's number tells
    # them apart; the same reading noted twice would not be.
    readings = [row["meta"].get("context", {}).get("reading") for row in rows
                if row["event"] == "verify_reading"]
    assert all(isinstance(number, int) for number in readings), readings
    seen = Counter((row["event"], row["actor"], row["meta"].get("outcome"),
                    row["meta"].get("from"), row["meta"].get("to"),
                    (row["meta"].get("context") or {}).get("reading"),
                    row["reason"])
                   for row in rows)
    assert [row for row, count in seen.items() if count > 1] == [], rows
    events = Counter(row["event"] for row in rows if row["meta"].get("outcome") == "accepted")
    assert events["plan_ready"] == 1 and events["gate_approved"] == 1, events
    assert events["verify_pass"] == 1, events
    thread = page.locator("#thread")
    expect(thread.locator(".message", has_text="to catch up")).to_have_count(1)  # one card
    expect(thread.locator(".bk-header", has_text="Plan:")).to_have_count(1)


def test_a_slash_command_answers_only_the_person_who_typed_it(page):
    be(page, "bob")
    page.fill("#channel-input", "/case list")
    page.press("#channel-input", "Enter")
    answer = page.locator("#channel .message.ephemeral")
    expect(answer).to_contain_text("cases")
    expect(answer).to_contain_text("only visible to you")
    be(page, "riley")
    expect(page.locator("#channel .message.ephemeral")).to_have_count(0)


# -- Block Kit as the page draws it (a sandbox of its own, no bot) ---------------------------

EVERY_BLOCK = [
    {"type": "header", "text": {"type": "plain_text", "text": "Plan: fail over checkout"}},
    {"type": "section", "text": {"type": "mrkdwn",
                                 "text": "*Risk* 0.4 — _needs_ `one` approver <@U0ALICE>"},
     "fields": [{"type": "mrkdwn", "text": "*Status*\nWAIT_GATE"},
                {"type": "plain_text", "text": "Severity SEV2"}]},
    {"type": "divider"},
    {"type": "context", "elements": [{"type": "mrkdwn", "text": "plan `21b9e0959a39`"}]},
    {"type": "actions", "elements": [
        {"type": "button", "action_id": "plan_approve", "style": "primary", "value": "ap_1",
         "text": {"type": "plain_text", "text": "Approve"}}]},
]


def test_block_kit_is_drawn_readably(browser, tmp_path):
    from slack_sdk import WebClient

    from bot.sandbox.server import Sandbox, create_sandbox_app
    from bot.sandbox.serving import ThreadedServer

    port = free_port()
    sandbox = Sandbox(events_url="http://127.0.0.1:9/slack/events", api_url="http://127.0.0.1:9",
                      public_url=f"http://127.0.0.1:{port}")
    server = ThreadedServer(create_sandbox_app(sandbox), "127.0.0.1", port, "sandbox").start()
    context = browser.new_context()
    try:
        slack = WebClient(token=sandbox.bot_token, base_url=sandbox.web_api_url)
        slack.chat_postMessage(channel="#incident", text="plan", blocks=EVERY_BLOCK)
        page = context.new_page()
        page.goto(sandbox.public_url)
        message = page.locator("#channel .message").first
        expect(message.locator(".bk-header")).to_have_text("Plan: fail over checkout")
        section = message.locator(".bk-section")
        expect(section.locator("b").first).to_have_text("Risk")
        expect(section.locator("i")).to_have_text("needs")
        expect(section.locator("code")).to_have_text("one")
        expect(section.locator(".mention")).to_have_text("@alice")
        expect(section.locator(".bk-fields > div")).to_have_count(2)
        expect(message.locator(".bk-divider hr")).to_have_count(1)
        expect(message.locator(".bk-context")).to_contain_text("plan 21b9e0959a39")
        expect(message.get_by_role("button", name="Approve")).to_have_class(
            "bk-button primary")
    finally:
        context.close()
        sandbox.close()
        server.stop()
