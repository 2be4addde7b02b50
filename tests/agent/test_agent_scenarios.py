"""The standard scenarios of tests/scenarios/: the scripted model reaches the expected plan with
the expected number of model calls, and the offline planner model reaches the same plan."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from bench.scenarios import Scenario, load_scenarios, run_scenario
from core.domain.plan_templates import load_template

SCENARIOS = load_scenarios()


def test_there_are_standard_scenarios() -> None:
    assert len(SCENARIOS) >= 5


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scripted_scenario(sqlite_engine: Engine, scenario: Scenario) -> None:
    outcome = run_scenario(sqlite_engine, scenario, "scripted")

    assert outcome.status == scenario.expect["status"]
    assert outcome.plan == load_template(scenario.expect["template"])
    assert outcome.model_calls == scenario.expect["model_calls"]
    assert outcome.refused == scenario.expect.get("refused", 0)
    assert outcome.tokens_in > outcome.tokens_out > 0


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_offline_planner_scenario(sqlite_engine: Engine, scenario: Scenario) -> None:
    outcome = run_scenario(sqlite_engine, scenario, "offline")
    template = scenario.expect.get("offline_template", scenario.expect["template"])

    assert outcome.status == scenario.expect["status"]
    assert outcome.plan == load_template(template)
    assert outcome.refused == 0
