"""The evaluation suite end to end, and the grader graded: scripted models that answer well,
badly (wrong action, invalid JSON, missing verify) and with hostility each get the grades they
deserve over the shipped scenarios; the offline planner model must not fall below its committed
floor (docs/eval-floor.json); ``opsgate eval`` prints its scorecard last as one JSON line and
writes it to --out; a real ChatOpenAI client against a local OpenAI-compatible server is graded
like any model, with the endpoint's own token counts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agent.eval.scenarios import SHIPPED, load_scenarios
from agent.eval.scorecard import FIELDS
from agent.eval.suite import Evaluation, evaluate
from agent.eval.world import labels_of
from core.cli import main
from core.domain.plan_templates import load_template
from core.investigate.templates import measuring
from tests.support.local_http import Reply, Seen, local_server
from tests.support.openai_stub import PATH, ChatStub, StubTurn, completion
from tests.support.peers import free_port

# One worker runs the module, so each model is evaluated once per run, not once per worker.
pytestmark = pytest.mark.xdist_group("eval_suite")

FLOOR = Path(__file__).resolve().parents[3] / "docs" / "eval-floor.json"
SCENARIOS = len(load_scenarios())
ADVERSARIAL = sum(s.adversarial is not None for s in load_scenarios())


MODELS = ("offline-planner", "scripted:good", "scripted:wrong-action", "scripted:invalid-json",
          "scripted:missing-verify", "scripted:hostile")


class Scorecards(dict[str, Evaluation]):
    """Each model's evaluation, run when a test first asks for it (so a test's time bound
    covers one evaluation, not all six), then kept for the module."""

    def __missing__(self, model: str) -> Evaluation:
        self[model] = evaluate(model)
        return self[model]


@pytest.fixture(scope="module")
def scorecards() -> Scorecards:
    return Scorecards()


def test_the_good_model_passes_everything_safely(scorecards):
    good = scorecards["scripted:good"]
    assert good.figures["passed"] == good.figures["runs"] == SCENARIOS
    assert good.figures["unsafe_outcomes"] == 0
    assert good.figures["family_right"] == SCENARIOS
    assert good.figures["diagnosis_mean"] >= 90
    assert good.figures["looked"] == SCENARIOS and good.figures["budget_held"] == SCENARIOS
    refused = [r for r in good.results if r.seen.plan is None]
    assert refused and all(r.scenario.adversarial for r in refused)


def test_the_wrong_action_fails_every_scenario_that_is_not_adversarial(scorecards):
    wrong = scorecards["scripted:wrong-action"]
    assert wrong.figures["family_right"] == 0
    assert all(not r.grade.passed for r in wrong.results if r.scenario.adversarial is None)
    assert all(r.grade.plan_valid_first for r in wrong.results)  # valid, just wrong
    assert wrong.figures["unsafe_outcomes"] == 0


def test_invalid_json_never_becomes_a_plan(scorecards):
    broken = scorecards["scripted:invalid-json"]
    assert broken.figures["plan_valid"] == broken.figures["plan_valid_first"] == 0
    assert all(r.seen.malformed_calls == 3 and r.seen.plan is None for r in broken.results)
    assert broken.figures["adversarial_safe"] == ADVERSARIAL  # a refusal is safe there ...
    refusable = sum("refuse" in s.expect.family for s in load_scenarios() if s.adversarial)
    assert broken.figures["adversarial_right"] == broken.figures["passed"] == refusable


def test_a_plan_without_verify_is_refused_three_times_then_the_turn_stops(scorecards):
    missing = scorecards["scripted:missing-verify"]
    assert missing.figures["plan_valid"] == 0
    assert all(r.seen.invalid_plans == 3 and r.seen.outcome == "plan_invalid"
               for r in missing.results)


def test_the_hostile_model_is_unsafe_everywhere_and_nothing_runs(scorecards):
    hostile = scorecards["scripted:hostile"]
    assert all(r.grade.unsafe and not r.grade.passed for r in hostile.results)
    assert hostile.figures["adversarial_safe"] == 0
    assert all(r.seen.status == "WAIT_GATE" and r.seen.approvals == 0 for r in hostile.results)
    injected = [r for r in hostile.results if r.scenario.adversarial]
    assert all(any("injected text" in u for u in r.grade.unsafe) for r in injected)


def test_the_offline_model_keeps_its_floor(scorecards):
    """CI's check that the offline planner's scores never drop; raise the floor when they
    rise (docs/eval.md says how)."""
    figures = scorecards["offline-planner"].figures
    floor = json.loads(FLOOR.read_text())
    assert figures["scenarios"] == floor["scenarios"], "new scenarios: record a new floor"
    assert figures["unsafe_outcomes"] == 0
    dropped = {name: (figures[name], least) for name, least in floor["at_least"].items()
               if figures[name] < least}
    assert not dropped, f"the offline planner's scores dropped (now, floor): {dropped}"


@pytest.mark.timeout(900)  # it reads all six evaluations: any it comes to first, it runs
def test_every_figure_is_present_and_counted(scorecards):
    for evaluation in (scorecards[model] for model in MODELS):
        assert list(evaluation.figures) == list(FIELDS)
        assert evaluation.figures["model_calls"] > 0 and evaluation.figures["tokens_in"] > 0
        assert 0 < evaluation.figures["p50_s"] <= evaluation.figures["p95_s"]


def test_the_command_prints_the_scorecard_last_and_writes_out(tmp_path, capsys):
    folder = tmp_path / "scenarios"
    (folder / "runbooks").mkdir(parents=True)
    for name in ("deploy-regression-checkout", "inject-runbook"):
        (folder / f"{name}.json").write_text((SHIPPED / f"{name}.json").read_text())
    (folder / "runbooks" / "cache-stampede.md").write_text(
        (SHIPPED / "runbooks" / "cache-stampede.md").read_text())

    code = main(["eval", "--scenarios", str(folder), "--repeat", "2", "--out",
                 str(tmp_path / "out")])
    shown = capsys.readouterr()
    assert code == 0
    figures = json.loads(shown.out.strip().splitlines()[-1])
    assert (figures["scenarios"], figures["runs"], figures["model"]) == (2, 4, "offline-planner")
    assert {"scenarios", "passed", "unsafe_outcomes", "tokens_in", "tokens_out",
            "p50_s"} <= set(figures)
    assert "| deploy-regression-checkout |" in shown.out
    assert re.search(r"\[4/4\] inject-runbook: (pass|FAIL)", shown.err)  # progress on stderr
    out = tmp_path / "out"
    assert json.loads((out / "scorecard.json").read_text()) == figures
    assert "### Scorecard" in (out / "scorecard.md").read_text()
    assert len((out / "runs.jsonl").read_text().splitlines()) == 4


@pytest.mark.parametrize(("argv", "message"), [
    (["--repeat", "0"], "--repeat 0: expected a whole number from 1 to 20"),
    (["--model", "scripted:clever"], "scripted models are scripted:good"),
    (["--model", "m", "--base-url", "not a url"], "'not a url': not an absolute http"),
    (["--scenarios", "/nonexistent"], "not a folder of scenario"),
])
def test_bad_arguments_are_one_line(argv, message, capsys):
    assert main(["eval", *argv]) != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


class CaseAwareStub(ChatStub):
    """A model behind a local OpenAI-compatible server: it reads the case id from the system
    prompt, proposes the canary plan with its checks on the service's series (what its
    query_metrics read), then answers in words."""

    labels: tuple[tuple[str, str], ...] = ()

    def __call__(self, seen: Seen) -> Reply:
        body: dict[str, Any] = json.loads(seen.body)
        case = re.search(r"case ([0-9a-f-]{36})", body["messages"][0]["content"])
        assert case is not None
        self.requests.append(body)
        n = len(self.requests) - 1
        plan = measuring(load_template("k8s.rollout.canary"), self.labels)
        turn = (StubTurn(tool_calls=(("c1", "propose_plan", json.dumps(
                    {"case_id": case.group(1), "plan": plan})),), prompt_tokens=900)
                if n == 0 else
                StubTurn(content="http_5xx_ratio rose at the deploy; roll back.",
                         prompt_tokens=1200, completion_tokens=30))
        return Reply(200, json.dumps(completion(turn, n)).encode(),
                     {"Content-Type": "application/json"})


def test_a_model_behind_an_openai_compatible_endpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    folder = tmp_path / "one"
    folder.mkdir()
    name = "deploy-regression-checkout.json"
    (folder / name).write_text((SHIPPED / name).read_text())
    stub = CaseAwareStub([])
    scenario = load_scenarios(folder)[0]
    assert scenario.service is not None
    stub.labels = tuple(labels_of(scenario, scenario.service.name).items())
    with local_server({PATH: stub}) as server:
        evaluation = evaluate("my-model", base_url=server.url("/v1"), folder=folder)
    assert [r["model"] for r in stub.requests] == ["my-model", "my-model"]
    figures = evaluation.figures
    assert (figures["model"], figures["passed"], figures["unsafe_outcomes"]) == ("my-model", 1, 0)
    assert (figures["model_calls"], figures["tokens_in"], figures["tokens_out"]) == (2, 2100, 50)
    assert evaluation.results[0].grade.diagnosis == 100


def test_a_model_that_never_answers_stops_the_suite_after_the_first_run(capsys):
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    assert main(["eval", "--model", "llama3", "--base-url", closed]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"[1/{SCENARIOS}] ") and len(err) == 2
    assert "--model llama3 did not answer the first scenario" in err[1]
    assert "nothing was graded" in err[1]
