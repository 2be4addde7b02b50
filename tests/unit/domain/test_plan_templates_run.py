"""The template catalog against the real executor: every step (and rollback step) is accepted by
its adapter's params model, and every verify block is one the evidence module can judge."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from core.demo import demo_verification
from core.domain.plan_templates import load_template, template_names
from core.domain.plans import parse_plan
from core.domain.verify import parse_verify
from core.evidence.configured import source_from_settings
from core.evidence.reading import evaluate
from core.evidence.scope import Moment
from core.evidence.stand_in import StaticSource
from core.outbound.allowlists import UrlAllowList
from core.settings import Settings
from core.steps.adapters.base import StepContext, StepRefused, parse_params
from core.steps.adapters.gateway_flip import FlipParams
from core.steps.adapters.http import HttpParams
from core.steps.adapters.k8s import RolloutParams
from core.steps.adapters.k8s_objects import ConfigMapParams, FlagParams, ScaleParams
from core.steps.adapters.mcp_call import McpCallParams
from core.steps.adapters.noop import NoopParams
from core.steps.adapters.registry import adapters_from_settings
from core.steps.adapters.script import ScriptParams

PARAMS: dict[str, type[BaseModel]] = {
    "noop": NoopParams, "script.exec": ScriptParams, "k8s.rollout": RolloutParams,
    "gateway.flip": FlipParams, "http.request": HttpParams, "mcp.call": McpCallParams,
    "k8s.scale": ScaleParams, "k8s.configmap": ConfigMapParams, "flag.set": FlagParams,
}


def every_step(name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(where, action, params) of each step and rollback step of template ``name``."""
    plan = parse_plan(load_template(name))
    found = [(f"steps[{n}]", str(s.action), dict(s.params)) for n, s in enumerate(plan.steps)]
    found += [(f"rollback[{n}]", str(s.action), dict(s.params))
              for n, s in enumerate(plan.rollback)]
    return found


def test_the_params_table_covers_every_action_the_executor_knows():
    assert set(PARAMS) == set(adapters_from_settings(Settings()))


@pytest.mark.parametrize("name", template_names())
def test_every_step_of_every_template_is_accepted_by_its_adapter(name):
    for where, action, params in every_step(name):
        try:
            parse_params(PARAMS[action], params, action)
        except StepRefused as refused:
            pytest.fail(f"{name} {where}: {refused.details['problems']}")


@pytest.mark.parametrize("name", template_names())
def test_every_verify_block_reads_bad_before_the_change_and_holds_after_in_the_demo(name):
    settings = demo_verification(Settings(_env_file=None))
    source = source_from_settings(settings)
    assert isinstance(source, StaticSource)
    verify = load_template(name)["verify"]
    block = parse_verify(verify)
    since = datetime(2026, 1, 1, tzinfo=UTC)
    scale = settings.verify_time_scale
    before = evaluate(verify, source, UrlAllowList([]), moment=Moment(at=since, scale=scale))
    assert before.state == "pending", before.reason  # the incident, as the change starts
    after = evaluate(verify, source.after_change(since), UrlAllowList([]),
                     moment=Moment(at=block.deadline(since, scale=scale), since=since,
                                   scale=scale))
    assert after.passed, after.reason
    failing = evaluate(verify, StaticSource({}), UrlAllowList([]))
    assert not failing.passed and "no value" in failing.reason, "the checks must read metrics"


def test_the_noop_template_runs_on_the_real_adapter():
    adapter = adapters_from_settings(Settings())["noop"]
    step = load_template("noop")["steps"][0]
    ctx = StepContext.for_step("case", "hash", 0, 1, timeout_s=step["timeout_s"])
    assert adapter.run(step["params"], ctx).ok


def test_a_param_the_adapter_does_not_know_is_what_this_test_catches():
    with pytest.raises(StepRefused):
        parse_params(RolloutParams, {"namespace": "prod", "deployment": "app",
                                     "strategy": "canary"}, "k8s.rollout")
