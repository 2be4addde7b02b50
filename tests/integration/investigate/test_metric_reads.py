"""The investigator's metric reads (core/investigate/metrics.py, issue 28) against Debian's real
Prometheus on 127.0.0.1 holding a recorded history (promtool): payments-api's 5xx ratio steps up
at the case's start and its p95 latency ten minutes later; orders-api is another service. Answers
are summaries with the change point's time; a query or window outside the component's scope is
refused before it is sent; Prometheus' own errors are sentences; an unreachable one is
``MetricsUnavailable``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from core.domain.promql import QueryBounds
from core.investigate.metrics import MetricsReader, MetricsUnavailable
from core.investigate.scope import OutOfScope, Target
from tests.support.peers import Prometheus, free_port

STEP_S = 15
PAYMENTS = Target("payments-api", "prod", (("app", "payments-api"),),
                  (("service", "payments-api"),), "payments-api")
ORDERS = Target("orders-api", "prod", (), (("service", "orders-api"),))
PODS = 30
RATIO = 'http_5xx_ratio{service="payments-api"}'
LATENCY = 'http_request_duration_p95_seconds{service="payments-api"}'


@dataclass(frozen=True)
class World:
    """The recorded history and the moments it is built around (whole minutes, UTC)."""

    prometheus: Prometheus
    end: int  # the last recorded sample; two minutes before the test started
    case_started_at: datetime  # an hour before ``end``: the 5xx ratio steps up then
    latency_at: datetime  # ten minutes later the p95 latency steps up

    def reader(self, bounds: QueryBounds | None = None) -> MetricsReader:
        return MetricsReader(self.prometheus.base_url, bounds or QueryBounds())

    def at(self, seconds: int) -> datetime:
        """``seconds`` after the case started (negative: before)."""
        return self.case_started_at + timedelta(seconds=seconds)

    def sent(self) -> list[str]:
        return [str(params.get("query", "")) for params in self.prometheus.queries()]


def history(end: int) -> str:
    """OpenMetrics for promtool: two hours of samples every 15 s up to ``end``, family by
    family."""
    start, case = end - 7200, end - 3600
    families: list[tuple[str, list[tuple[str, Callable[[int], float]]]]] = [
        ("http_5xx_ratio", [('service="payments-api"', lambda t: 0.25 if t >= case else 0.01),
                            ('service="orders-api"', lambda t: 0.02)]),
        ("http_request_duration_p95_seconds",
         [('service="payments-api"', lambda t: 1.4 if t >= case + 600 else 0.2)]),
        ("payments_pod_up", [(f'service="payments-api",pod="p{i:02d}"', lambda t: 1.0)
                             for i in range(PODS)]),
        ("payments_queue_seconds",
         [('service="payments-api"', lambda t: 3.0 if t >= case else float("nan"))]),
        ("orders_queue_depth", [('service="orders-api"', lambda t: 5.0)]),
    ]
    lines = []
    for name, series in families:
        lines.append(f"# TYPE {name} gauge")
        for labels, value in series:
            lines += [f"{name}{{{labels}}} {value(t)} {t}" for t in range(start, end + 1, STEP_S)]
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture
def world(prometheus_server: Callable[..., Prometheus]) -> World:
    end = int(time.time() // 60 * 60) - 120
    prometheus = prometheus_server([], history=history(end))
    case = datetime.fromtimestamp(end - 3600, UTC)
    return World(prometheus, end, case, case + timedelta(minutes=10))


def now() -> datetime:
    return datetime.now(UTC)


def unreachable() -> MetricsReader:
    """A Prometheus where nothing listens: a query that were sent would be MetricsUnavailable."""
    return MetricsReader(f"http://127.0.0.1:{free_port()}", QueryBounds())


# -- summaries --------------------------------------------------------------------------------


def test_a_range_query_answers_a_summary_with_the_change_point(world: World):
    answer = world.reader().query(PAYMENTS, RATIO, case_started_at=world.case_started_at,
                                  now=now(), start=world.at(-1800), end=world.at(1800),
                                  step_s=60)
    assert answer | {"series": None} == {
        "component": "payments-api", "query": RATIO, "kind": "range",
        "start": iso(world.at(-1800)), "end": iso(world.at(1800)), "step_s": 60,
        "result_type": "matrix", "series_total": 1, "notes": [], "series": None}
    assert answer["series"] == [{
        "labels": {"__name__": "http_5xx_ratio", "service": "payments-api"}, "points": 61,
        "first": 0.01, "last": 0.25, "min": 0.01, "max": 0.25,
        "change": {"at": iso(world.case_started_at), "before": 0.01, "after": 0.25}}]


def test_each_series_has_its_own_change_point_at_any_step(world: World):
    reader = world.reader()
    # No step: about 240 points over the window (here 30 s over two hours).
    latency = reader.query(PAYMENTS, LATENCY, case_started_at=world.case_started_at,
                           now=now(), start=world.at(-3600), end=world.at(3600))
    assert latency["step_s"] == 30
    [series] = latency["series"]
    assert series["change"] == {"at": iso(world.latency_at), "before": 0.2, "after": 1.4}
    # 15 s over two hours: 480 points, located on buckets of two, then refined to the very
    # sample (the 240th, in the middle of its bucket).
    fine = reader.query(PAYMENTS, RATIO, case_started_at=world.case_started_at, now=now(),
                        start=world.at(-3585), end=world.at(3600), step_s=15)
    assert fine["series"][0]["points"] == 480
    assert fine["series"][0]["change"]["at"] == iso(world.case_started_at)


def test_an_instant_query_answers_values_and_a_range_vector_its_change(world: World):
    reader = world.reader()
    instant = reader.query(PAYMENTS, f"max({RATIO})", case_started_at=world.case_started_at,
                           now=now(), end=world.at(60))
    assert instant["kind"] == "instant" and instant["at"] == iso(world.at(60))
    assert instant["result_type"] == "vector"
    assert instant["series"] == [{"labels": {}, "points": 1, "first": 0.25, "last": 0.25,
                                  "min": 0.25, "max": 0.25, "change": None}]
    window = reader.query(PAYMENTS, f"{RATIO}[30m]", case_started_at=world.case_started_at,
                          now=now(), end=world.at(600))
    assert window["result_type"] == "matrix"
    assert window["series"][0]["points"] == 121  # the raw samples, summarised
    assert window["series"][0]["change"]["at"] == iso(world.case_started_at)
    scalar = reader.query(PAYMENTS, f"scalar(max({RATIO}))",
                          case_started_at=world.case_started_at, now=now(), end=world.at(-60))
    assert scalar["result_type"] == "scalar" and scalar["series"][0]["last"] == 0.01


def test_not_a_number_is_left_out_and_counted(world: World):
    answer = world.reader().query(
        PAYMENTS, 'payments_queue_seconds{service="payments-api"}',
        case_started_at=world.case_started_at, now=now(), start=world.at(-600),
        end=world.at(600), step_s=60)
    [series] = answer["series"]
    assert series["not_finite"] == 10 and series["points"] == 11
    assert series["first"] == series["min"] == series["max"] == 3.0
    assert series["change"] is None  # flat once it has numbers


def test_thirty_series_are_cut_to_twenty_with_a_note(world: World):
    answer = world.reader().query(
        PAYMENTS, 'payments_pod_up{service="payments-api"}',
        case_started_at=world.case_started_at, now=now(), start=world.at(-600), end=world.at(0))
    assert answer["series_total"] == PODS and len(answer["series"]) == 20
    assert answer["notes"] == ["10 more series cut (at most 20 are shown): aggregate "
                               "(sum by (…)) or add matchers to see the rest"]
    assert [s["labels"]["pod"] for s in answer["series"]] == [f"p{i:02d}" for i in range(20)]
    assert all(s["change"] is None and s["first"] == 1.0 for s in answer["series"])


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "sentence"), [
    ("http_5xx_ratio", 'add service="payments-api" to http_5xx_ratio'),
    ('http_5xx_ratio{service="orders-api"}', 'reads service="orders-api"'),
    ('sum(http_5xx_ratio{service="payments-api"}) / sum(orders_queue_depth)',
     'add service="payments-api" to orders_queue_depth'),
    ('http_5xx_ratio{service=~"payments-api|orders-api"}', "reads service=~"),
])
def test_a_query_outside_the_component_is_refused_and_never_sent(world: World, query,
                                                                 sentence):
    with pytest.raises(OutOfScope, match="the query is refused: ") as refused:
        world.reader().query(PAYMENTS, query, case_started_at=world.case_started_at, now=now())
    assert sentence in refused.value.message
    world.reader().query(PAYMENTS, RATIO, case_started_at=world.case_started_at, now=now())
    assert RATIO in world.sent() and query not in world.sent()


@pytest.mark.parametrize(("window", "sentence"), [
    ({"start": -6 * 3600 - 60}, "is before"),
    ({"start": -3600, "end": 7 * 3600}, "is after now"),
    ({"end": -6 * 3600 - 1}, "the query's time"),
    ({"end": 4 * 3600}, "is after now"),
    ({"start": 0, "end": 0}, "is not before its end"),
    ({"start": 60, "end": 0}, "is not before its end"),
    ({"start": -3600, "step_s": 5}, "the step 5s is finer than 15s: use step_s of at least 15"),
    ({"start": -3600, "step_s": 14.9}, "finer than 15s"),
    ({"start": -3600, "step_s": float("nan")}, "not a number of seconds"),
])
def test_a_window_or_step_outside_the_bounds_is_refused_before_sending(window, sentence):
    case_started_at = now() - timedelta(hours=1)
    moments = {key: case_started_at + timedelta(seconds=value)
               for key, value in window.items() if key != "step_s"}
    with pytest.raises(OutOfScope) as refused:
        unreachable().query(PAYMENTS, RATIO, case_started_at=case_started_at, now=now(),
                            step_s=window.get("step_s"), **moments)
    assert sentence in refused.value.message, refused.value.message


def test_the_earliest_window_is_six_hours_before_the_case_start():
    case_started_at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with pytest.raises(OutOfScope) as refused:
        unreachable().query(PAYMENTS, RATIO, case_started_at=case_started_at,
                            now=case_started_at + timedelta(hours=1),
                            start=datetime(2026, 3, 1, 5, 59, 59, tzinfo=UTC))
    assert refused.value.message == (
        "the window's start 2026-03-01T05:59:59Z is before 2026-03-01T06:00:00Z, 6 h before "
        "the case started: read from then on")
    with pytest.raises(MetricsUnavailable):  # the earliest moment itself is allowed (and sent)
        unreachable().query(PAYMENTS, RATIO, case_started_at=case_started_at,
                            now=case_started_at + timedelta(hours=1),
                            start=datetime(2026, 3, 1, 6, 0, tzinfo=UTC), step_s=15)


def test_more_points_than_prometheus_answers_are_refused():
    case_started_at = now() - timedelta(days=3)  # a long case: the window spans 78 h
    with pytest.raises(OutOfScope) as refused:
        unreachable().query(PAYMENTS, RATIO, case_started_at=case_started_at, now=now(),
                            start=case_started_at - timedelta(hours=6), step_s=15)
    assert "points per series; Prometheus answers at most 11000: use step_s of at least 26" \
        in refused.value.message
    with pytest.raises(MetricsUnavailable):  # with no step, one is chosen that fits
        unreachable().query(PAYMENTS, RATIO, case_started_at=case_started_at, now=now(),
                            start=case_started_at - timedelta(hours=6))


def test_a_component_without_metric_labels_reads_nothing():
    bare = Target("batch", "prod", (), ())
    for read in (lambda r: r.query(bare, "up", case_started_at=now(), now=now()),
                 lambda r: r.list_metrics(bare, case_started_at=now(), now=now())):
        with pytest.raises(OutOfScope, match="names no metric labels"):
            read(unreachable())


def test_a_tenant_scoped_prometheus_needs_the_case_s_tenant():
    reader = MetricsReader("http://127.0.0.1:9", QueryBounds(scope_label="tenant"))
    with pytest.raises(OutOfScope, match="the case has no tenant"):
        reader.list_metrics(PAYMENTS, case_started_at=now(), now=now())
    with pytest.raises(OutOfScope, match="no tenant to scope"):
        reader.query(PAYMENTS, RATIO, case_started_at=now(), now=now())
    with pytest.raises(OutOfScope, match='add service="payments-api" to x'):
        reader.scoped("acme").query(PAYMENTS, 'x{tenant="acme"}', case_started_at=now(),
                                    now=now())


# -- Prometheus' own errors -------------------------------------------------------------------


def test_prometheus_errors_are_sentences(world: World):
    bad = 'label_replace(http_5xx_ratio{service="payments-api"}, "a", "b", "c", "(")'
    answer = world.reader().query(PAYMENTS, bad, case_started_at=world.case_started_at,
                                  now=now())
    assert answer["error"] == ("Prometheus refused the query (HTTP 422): invalid regular "
                               "expression in label_replace(): (")
    assert answer["series"] == [] and answer["series_total"] == 0
    hurried = world.reader(QueryBounds(timeout_s=1e-9)).query(
        PAYMENTS, RATIO, case_started_at=world.case_started_at, now=now())
    assert hurried["error"].startswith("Prometheus timed out on the query (HTTP 503)")
    assert hurried["error"].endswith("narrow the query or shorten its window")


def test_an_unreachable_prometheus_is_metrics_unavailable(world: World):
    world.prometheus.stop()
    reader = world.reader()
    with pytest.raises(MetricsUnavailable, match="Prometheus is unreachable \\(ConnectError\\)"):
        reader.query(PAYMENTS, RATIO, case_started_at=world.case_started_at, now=now())
    with pytest.raises(MetricsUnavailable) as unavailable:
        reader.list_metrics(PAYMENTS, case_started_at=world.case_started_at, now=now())
    assert unavailable.value.code == "metrics_unavailable"


# -- list_metrics -----------------------------------------------------------------------------


def test_list_metrics_names_the_component_s_metrics_and_label_values(world: World):
    answer = world.reader().list_metrics(PAYMENTS, case_started_at=world.case_started_at,
                                         now=now())
    assert answer["selector"] == '{service="payments-api"}'
    assert answer["metrics"] == ["http_5xx_ratio", "http_request_duration_p95_seconds",
                                 "payments_pod_up", "payments_queue_seconds"]
    assert answer["metrics_total"] == 4
    assert answer["labels"] == [{"name": "pod", "values": [f"p{i:02d}" for i in range(20)],
                                 "values_total": PODS}]
    assert answer["labels_total"] == 1
    assert answer["notes"] == ["at most 20 values are shown per label"]
    assert answer["start"] == iso(world.case_started_at - timedelta(hours=6))
    orders = world.reader().list_metrics(ORDERS, case_started_at=world.case_started_at,
                                         now=now())
    assert orders["metrics"] == ["http_5xx_ratio", "orders_queue_depth"]
    assert orders["labels"] == [] and orders["notes"] == []


def test_list_metrics_filters_by_a_name_substring(world: World):
    answer = world.reader().list_metrics(PAYMENTS, case_started_at=world.case_started_at,
                                         now=now(), match="DURATION")
    assert answer["metrics"] == ["http_request_duration_p95_seconds"]
    assert answer["match"] == "DURATION" and answer["metrics_total"] == 1
    none = world.reader().list_metrics(PAYMENTS, case_started_at=world.case_started_at,
                                       now=now(), match='"}) or {__name__=~".+')
    assert none["metrics"] == []  # a filter is text, never PromQL


def test_list_metrics_reads_only_the_window(world: World):
    """A case opened long after the history: its window starts after the last sample."""
    later = datetime.fromtimestamp(world.end, UTC) + timedelta(hours=7)
    answer = world.reader().list_metrics(PAYMENTS, case_started_at=later,
                                         now=later + timedelta(minutes=1))
    assert answer["metrics"] == [] and answer["metrics_total"] == 0


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
