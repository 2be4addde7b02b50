"""The template catalog: every template is a valid ChangePlan, unknown names list the known ones."""

from __future__ import annotations

import pytest

from core.domain.plan_templates import load_template, template_names
from core.domain.plans import ParsedPlan, parse_plan, plan_hash, plan_problems
from core.errors import NotFound

EXPECTED = {"k8s.rollout.canary", "script.restart", "gateway.flip.failover", "noop"}


def test_the_catalog_offers_the_four_templates():
    assert set(template_names()) == EXPECTED
    assert list(template_names()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_template_meets_the_change_plan_schema(name):
    plan = load_template(name)
    assert plan_problems(plan) == []
    assert isinstance(parse_plan(plan), ParsedPlan)
    assert plan["rollback"] and plan["verify"], "the guard needs both; templates must carry them"


def test_templates_differ_so_their_hashes_differ():
    hashes = {plan_hash(load_template(name)) for name in template_names()}
    assert len(hashes) == len(EXPECTED)


def test_each_load_is_a_fresh_copy():
    first = load_template("noop")
    first["steps"].clear()
    assert load_template("noop")["steps"], "a caller's change must not leak into the catalog"


def test_an_unknown_template_is_not_found_and_lists_the_known_ones():
    with pytest.raises(NotFound) as caught:
        load_template("k8s.delete.everything")
    assert caught.value.details["known"] == sorted(EXPECTED)
    assert "k8s.rollout.canary" in caught.value.message
