"""The template planner's choice: keywords in the case title pick a catalog template."""

from __future__ import annotations

import pytest

from core.consumers.planner import DEFAULT_TEMPLATE, KEYWORDS, choose_template
from core.domain.plan_templates import template_names


@pytest.mark.parametrize(
    ("title", "template"),
    [("p95 latency spike on checkout", "noop"),
     ("eu-west region down, fail over to standby", "gateway.flip.failover"),
     ("Error rate up since the 14:02 deploy", "k8s.rollout.canary"),
     ("Regression after release 4.2", "k8s.rollout.canary"),
     ("payments worker OOMKilled and crashlooping", "script.restart"),
     ("search API hung, needs a restart", "script.restart"),
     ("Region failover after the bad deploy, then restart", "gateway.flip.failover"),
     ("", "noop")],
)
def test_the_title_picks_the_template(title, template):
    assert choose_template(title) == template


def test_every_keyword_names_a_template_of_the_catalog():
    assert {template for template, _ in KEYWORDS} | {DEFAULT_TEMPLATE} <= set(template_names())
