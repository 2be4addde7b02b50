"""The evaluation judges verify blocks against its own time-aware series source (fast: no server
per run). Here Debian's real Prometheus gets the same series — both worlds of two scenarios,
written into its data folder by promtool — and every reading the verifier would take from the
fix to the deadline must come out the same from both: the same state, the same value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.eval.scenarios import SHIPPED, load_scenario
from agent.eval.series import (
    FIX_AT_S,
    MAX_WAIT_S,
    POLL_S,
    RECORDED_FROM_S,
    STEP_S,
    SeriesSource,
    World,
    value_at,
)
from core.domain.plan_templates import load_template
from core.domain.verify import parse_verify
from core.evidence.prometheus import PrometheusSource
from core.evidence.reading import read_block
from core.evidence.scope import Moment
from core.evidence.sources import Worst
from core.outbound.allowlists import UrlAllowList

SCENARIOS = ("transient-blip-cleared", "region-outage-eu-west")
WORLDS: tuple[World, ...] = ("after", "before")
BLOCKS: list[dict[str, Any]] = [
    *(load_template(name)["verify"] for name in ("script.restart", "k8s.rollout.canary",
                                                  "gateway.flip.failover", "noop")),
    {"metric": "http_5xx_ratio", "below": 0.01},  # judged on one reading
    {"metric": "standby_saturation", "above": 0.5, "for_s": 90, "timeout_s": 600},
]


def series_name(scenario: str, world: World, metric: str) -> str:
    return f"{scenario.replace('-', '_')}_{world}__{metric}"


class Prefixed:
    """Prometheus holds each scenario's world under its own metric names."""

    def __init__(self, source: PrometheusSource, scenario: str, world: World) -> None:
        self.source, self.scenario, self.world = source, scenario, world

    def read(self, query: str, *, over_s: float | None = None, worst: Worst = "max",
             at: datetime | None = None) -> float:
        return self.source.read(series_name(self.scenario, self.world, query), over_s=over_s,
                                worst=worst, at=at)


def history(origin: float) -> str:
    lines = []
    for name in SCENARIOS:
        scenario = load_scenario(SHIPPED / f"{name}.json")
        for world in WORLDS:
            for metric, shape in scenario.series.items():
                lines += [f"{series_name(name, world, metric)} "
                          f"{value_at(name, metric, shape, t, world)!r} {origin + t:.3f}"
                          for t in range(RECORDED_FROM_S, FIX_AT_S + MAX_WAIT_S + 1, STEP_S)]
    return "\n".join([*sorted(lines, key=lambda line: float(line.rsplit(" ", 1)[1])),
                      "# EOF", ""])


def readings(block: dict[str, Any], source: Any, origin: datetime) -> list[tuple[str, Any]]:
    parsed = parse_verify(block)
    since = origin + timedelta(seconds=FIX_AT_S)
    polls = int(parsed.wait_s(max_wait_s=MAX_WAIT_S) // POLL_S) + 1
    found = []
    for n in range(polls):
        outcome = read_block(parsed, source, UrlAllowList([]),
                             Moment(at=since + timedelta(seconds=n * POLL_S), since=since))
        found.append((outcome.state, None if outcome.observed is None
                      else pytest.approx(outcome.observed, rel=1e-9)))
    return found


def test_the_series_source_reads_as_prometheus_does(prometheus_server):
    ends = datetime.now(UTC).timestamp() - 120  # the last sample lies in the past
    start = ends - (FIX_AT_S + MAX_WAIT_S)
    origin_s = start - start % STEP_S  # samples on whole minutes, as the subqueries step
    prometheus = prometheus_server([], history=history(origin_s))
    origin = datetime.fromtimestamp(origin_s, UTC)
    real = PrometheusSource(prometheus.base_url)
    compared = held = 0
    for name in SCENARIOS:
        scenario = load_scenario(SHIPPED / f"{name}.json")
        for world in WORLDS:
            ours = SeriesSource(name, scenario.series, world, origin)
            theirs = Prefixed(real, name, world)
            for block in BLOCKS:
                expected = readings(block, theirs, origin)
                assert readings(block, ours, origin) == expected, (name, world, block)
                compared += len(expected)
                held += sum(state == "held" for state, _ in expected)
    assert compared > 500 and 0 < held < compared  # both verdicts were exercised
