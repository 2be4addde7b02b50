"""The plan message says what will happen in words: every adapter's step has a sentence, plans of
any shape (hostile, agent-written) render without raw JSON, cut only between words, within Block
Kit's limits; a verify check that already holds is marked; the JSON is one click away."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.blocks import plan_message, step_line, verify_lines
from bot.mrkdwn import BOUNDARY as _BOUNDARY
from bot.mrkdwn import at_word, shown
from bot.plan_words import details_modal, said_mrkdwn
from core.alerts.text import storable
from core.domain.plans import StepAction, canonical_json, parse_plan, parsed_or_none
from core.domain.policy import ApprovalPolicy
from core.evidence.baseline import read_before, tell_the_model
from core.evidence.stand_in import StaticSource
from core.steps.sentences import DESCRIBE, step_sentence
from core.steps.words import Value, plain_text
from tests.support.plan_shapes import JSONISH, plan_shapes
from tests.support.slack import block_kit_problems

CASE = {"case_id": "0f0e0d0c-0000-4000-8000-000000000001", "title": "checkout 5xx",
        "status": "WAIT_GATE", "version": 3, "severity": "SEV2", "tenant": "shop",
        "updated_at": "2026-11-23T07:00:00+00:00"}
POLICY = ApprovalPolicy(approvers=frozenset({"U0BOB", "U0CAROL"}))
HOSTILE = st.one_of(st.text(max_size=300), st.sampled_from([
    "<!channel> `rm -rf` *bold* &amp; <https://evil.example|click>", "a" * 600,
    ("word " * 200).strip(), "```", "x\ny\tz", "&" * 700]))
LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z")


def plan_of(*steps: dict[str, Any], verify: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"title": "Fix checkout", "risk_score": 0.2,
            "steps": [{**s, "timeout_s": 60, "retry": 1} for s in steps],
            "rollback": {"steps": []},
            "verify": verify or {"metric": "http_5xx_ratio", "below": 0.01, "for_s": 300}}


def lines_of(*steps: dict[str, Any]) -> list[str]:
    return [plain_text(step_sentence(step)) for step in parse_plan(plan_of(*steps)).steps]


def test_every_action_has_its_adapters_sentence() -> None:
    assert set(DESCRIBE) == set(StepAction)
    assert lines_of(
        {"action": "k8s.rollout", "params": {"operation": "set-image", "namespace": "payments",
                                             "deployment": "payments-api", "container": "api",
                                             "image": "payments:v2.3.9"}},
        {"action": "k8s.rollout", "params": {"operation": "undo", "namespace": "shop",
                                             "deployment": "checkout"}},
        {"action": "k8s.rollout", "params": {"operation": "restart", "namespace": "x",
                                             "deployment": "y"}},
        {"action": "http.request", "params": {"method": "POST", "json": {"enabled": False},
                                              "url": "https://flags.internal/api/flags/new-checkout"}},
        {"action": "script.exec", "params": {"argv": ["restart-service", "--graceful"]}},
        {"action": "gateway.flip", "params": {"route": "checkout", "from": "blue", "to": "green"}},
        {"action": "noop", "params": {"note": "watch only"}},
        {"action": "mcp.call", "params": {"server": "ops", "tool": "scale",
                                          "arguments": {"replicas": 3}}},
    ) == [
        "Set the image of deployment payments/payments-api (container api) to payments:v2.3.9",
        "Roll deployment shop/checkout back to its previous revision",
        "Restart deployment x/y",
        "POST https://flags.internal/api/flags/new-checkout {enabled: false}",
        "Run restart-service --graceful",
        "Move route checkout's traffic from blue to green at the traffic gateway",
        "Change nothing: watch only",
        "Call tool scale of MCP server ops with {replicas: 3}",
    ]


def test_a_step_the_adapter_would_refuse_says_so_without_its_values() -> None:
    [line] = lines_of({"action": "k8s.rollout", "params": {"operation": "drop-db",
                                                           "secret": "<!channel> hunter2"}})
    assert line.startswith("A k8s.rollout step whose parameters it refuses (operation")
    assert "hunter2" not in line and "drop-db" not in line


def test_values_are_code_escaped_and_the_step_line_says_its_limits() -> None:
    plan = parse_plan(plan_of({"action": "script.exec",
                               "params": {"argv": ["notify", "<!channel> `x` & y"]}}))
    line = step_line(1, plan.steps[0])
    assert line == ("1. Run `notify '&lt;!channel&gt; 'x' &amp; y'` _(up to 60 s, retried "
                    "once)_")


@given(text=st.text(max_size=80), room=st.integers(0, 90))
def test_a_cut_ends_where_a_word_ends(text: str, room: int) -> None:
    kept = at_word(text, room)
    assert text.startswith(kept) and len(kept) <= max(room, 0)
    assert kept == text or kept == "" or _BOUNDARY.match(text[len(kept)])


@given(note=HOSTILE, limit=st.integers(10, 300))
def test_a_sentence_is_cut_at_a_word_with_an_ellipsis(note: str, limit: int) -> None:
    drawn = said_mrkdwn(("Change nothing: ", Value(note)), limit)
    plain = drawn.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    assert len(plain.replace("`", "")) <= limit + 2  # the code span's marks are not text
    assert "<" not in drawn and ">" not in drawn  # nothing pings, nothing links


VALID_STEPS = st.one_of(
    st.builds(lambda op, ns, dep: {"action": "k8s.rollout", "params": {
        "operation": op, "namespace": ns, "deployment": dep}},
        st.sampled_from(["restart", "undo"]), LABEL, LABEL),
    st.builds(lambda argv, env: {"action": "script.exec", "params": {"argv": argv, "env": env}},
              st.lists(HOSTILE.filter(lambda a: "\x00" not in a), min_size=1, max_size=4)
              .filter(lambda argv: bool(argv[0])),
              st.dictionaries(st.sampled_from(["TZ", "LANG"]), st.text(max_size=40).filter(
                  lambda v: "\x00" not in v), max_size=2)),
    st.builds(lambda path, body: {"action": "http.request", "params": {
        "method": "POST", "url": f"https://flags.internal/{path}", "json": body}},
        st.text(max_size=200), JSONISH),
    st.builds(lambda note: {"action": "noop", "params": {"note": note}},
              HOSTILE.map(lambda n: n[:1000])),
    st.builds(lambda args: {"action": "mcp.call", "params": {
        "server": "ops", "tool": "scale", "arguments": args}},
        st.dictionaries(st.text(max_size=8), JSONISH, max_size=4)),
)


@st.composite
def hostile_plans(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return draw(plan_shapes())
    steps = draw(st.lists(VALID_STEPS, min_size=1, max_size=50))
    plan = plan_of(*steps)
    plan["title"] = draw(HOSTILE.filter(lambda t: 0 < len(t) <= 200 and t.strip()))
    return plan


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=hostile_plans())
def test_any_plan_reads_as_sentences_within_block_kits_limits(plan: Any) -> None:
    parsed = parsed_or_none(plan)
    if parsed is None:
        return  # refused by the guard; the message of an unreadable plan has its own test
    _, blocks = plan_message(CASE, plan, parsed.digest, "ap_1", "U0ALICE", POLICY)
    assert block_kit_problems(blocks) == []
    steps = next(b["text"]["text"] for b in blocks
                 if b.get("text", {}).get("text", "").startswith("*Steps*"))
    for step in (*parsed.steps, *parsed.rollback):
        if len(step.params) > 0:
            raw = canonical_json(dict(step.params))
            assert raw not in json.dumps(blocks, ensure_ascii=False), "raw JSON shown"
    listed = steps.split("\n")[1:]
    assert listed and all(line.startswith(tuple(f"{n}. " for n in range(1, 51))) or
                          line.startswith("… and ") for line in listed)
    header = blocks[0]["text"]["text"]
    whole = " ".join(f"Plan: {parsed.title}".split())
    assert header == whole or (header.endswith("…") and whole.startswith(header[:-1]) and
                               _BOUNDARY.match(whole[len(header) - 1]))


def test_a_check_that_holds_already_is_marked_and_the_model_is_told() -> None:
    verify = {"checks": [{"metric": "latency_p95_ms", "below": 500, "for_s": 300},
                         {"metric": "http_5xx_ratio", "below": 0.01}]}
    source = StaticSource({"latency_p95_ms": 388.0, "http_5xx_ratio": 0.04})
    readings = read_before(verify, source, "shop")
    assert [(r.index, r.holds) for r in readings] == [(0, True), (1, False)]
    lines = verify_lines(verify, readings)
    assert lines[0] == ("• `latency_p95_ms` below 500 for 5 min after the change\n"
                        "    ⚠️ *holds already*: latency_p95_ms = 388 now, below 500 (stand-in) — "
                        "it cannot show that the change worked")
    assert lines[1] == "• `http_5xx_ratio` below 0.01 once the change is done — now 0.04 (stand-in)"
    told = tell_the_model(readings)
    assert told is not None and "check 1 (latency_p95_ms = 388 now, below 500)" in told
    assert tell_the_model(readings[1:]) is None
    plan = plan_of({"action": "noop"}, verify=verify)
    _, blocks = plan_message(CASE, plan, "h" * 64, "ap_1", "U0ALICE", POLICY, readings=readings)
    assert "holds already" in json.dumps(blocks, ensure_ascii=False)
    assert any(e["action_id"] == "plan_approve" for b in blocks if b["type"] == "actions"
               for e in b["elements"])  # marked, not refused


def test_no_source_no_reading() -> None:
    assert read_before({"metric": "x", "below": 1}, None, None) == []
    assert read_before({"metric": "x", "below": 1}, StaticSource({}), None) == []


def test_the_details_modal_holds_the_exact_json_within_limits() -> None:
    plan = plan_of({"action": "noop", "params": {"note": "&" * 3000}})
    modal = details_modal(plan["title"], plan)
    assert block_kit_problems(modal["blocks"]) == []
    text = "".join(b["text"]["text"].strip("`") for b in modal["blocks"][1:])
    assert json.loads(text.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")) \
        == plan
    assert len(modal["title"]["text"]) <= 24
    titled = details_modal("Roll checkout back to revision 11 (registry.example.com/shop/x:v1)",
                           plan)
    assert "“Roll checkout back to revision 11 (registry.example.com/shop…”" in \
        titled["blocks"][0]["elements"][0]["text"]  # cut at a word, and said to be cut


@given(text=st.text(max_size=300), limit=st.integers(2, 200))
def test_shown_text_is_cut_where_a_word_ends(text: str, limit: int) -> None:
    said = shown(text, limit)
    read = said.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    flat = storable(" ".join(text.split()))
    assert len(read) <= limit
    if read != flat and read.endswith("…"):
        kept = read[:-1]
        assert flat.startswith(kept)
        words = [w for w in re.split(r"[\s/.,:;=_()\[\]{}-]", flat) if w]
        # cut where a word ends, unless the first word alone is longer than the line
        assert _BOUNDARY.match(flat[len(kept)]) or len(words[0]) >= limit - 1 or not kept
