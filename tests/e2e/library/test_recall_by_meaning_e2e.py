"""Issue 30's example end to end: a new case "checkout can't take money since 10:05" shares no
word with the verified past case "payment gateway timeouts, card charges failing". Through the
evaluation's real world (Debian's Prometheus and Alertmanager, the recorded Kubernetes API) and
the real agent graph, gateway and case service, the embedded planner finds that case by meaning
(the hybrid ranking) and proposes the plan that resolved it, naming it; with embeddings off
(full-text search alone) the library misses it and the planner does not learn."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.eval.contestants import contestant
from agent.eval.run import Observed, run_scenario, scratch
from agent.eval.scenarios import SHIPPED, load_scenario
from agent.eval.world import EvalWorld, eval_world, labels_of

SCENARIO = load_scenario(SHIPPED / "checkout-cant-take-money.json")
PAST = SCENARIO.past_cases[0]
assert SCENARIO.service is not None
SERIES = ", ".join(f'{key}="{value}"' for key, value in
                   sorted(labels_of(SCENARIO, SCENARIO.service.name).items()))
"""The matchers of the scenario's service's series: what a verify check must select."""


@pytest.fixture(scope="module")
def world() -> Iterator[EvalWorld]:
    with eval_world([SCENARIO]) as started:
        yield started


def planned(world: EvalWorld) -> Observed:
    _name, offline = contestant(None)
    with scratch() as place:
        return run_scenario(SCENARIO, SHIPPED, offline, place, world)


def test_the_planner_proposes_the_plan_of_the_case_found_by_meaning(world: EvalWorld) -> None:
    seen = planned(world)
    assert seen.status == "WAIT_GATE"
    assert seen.plan is not None
    assert isinstance(PAST.plan, dict)
    assert seen.plan["steps"] == PAST.plan["steps"]
    # The past case was verified on the service's series, so its checks selected them (the
    # verify scope rule); the learned plan carries those checks as they were.
    assert seen.plan["verify"] == {"checks": [
        {**check, "metric": f"{check['metric']}{{{SERIES}}}"}
        for check in PAST.plan["verify"]["checks"]]}
    assert "(learned from case " in seen.plan["title"]
    assert f"({PAST.title}), the most similar verified case (alike in meaning: " in seen.words
    assert "http_5xx_ratio went from 0.2% to" in seen.words  # it looked before it learned


def test_by_words_alone_the_past_case_is_missed(world: EvalWorld,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPSGATE_EMBEDDINGS_MODEL", "none")
    seen = planned(world)
    assert seen.plan is not None
    assert "learned from case" not in seen.plan["title"]
    assert PAST.title not in seen.words
    assert seen.plan["steps"] != PAST.plan["steps"]  # type: ignore[index]
