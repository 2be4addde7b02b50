"""The PromQL check (core/domain/promql.py): what may be sent to Prometheus, on the issue's own
payloads and on the shapes a model could write (hypothesis), and the readers that refuse before
sending. No server: a refused query never leaves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.analysis.catalog import MetricSpec
from core.analysis.sources import PrometheusRangeSource, for_case
from core.domain.promql import MAX_QUERY_CHARS, QueryBounds, check_query, seconds_param
from core.domain.verify import parse_verify, query_problems
from core.evidence.configured import promql_bounds
from core.evidence.prometheus import PrometheusSource, prometheus_answer
from core.evidence.reading import evaluate
from core.evidence.sources import EvidenceMissing, QueryRefused, QueryTimedOut
from core.evidence.stand_in import StaticSource
from core.outbound.allowlists import UrlAllowList
from core.settings import Settings

ISSUE_QUERY = 'count(count_over_time({__name__=~".+"}[10000d:1s]))'
"""Issue 24, finding 2: sent as written, it grew a real Prometheus to 9.8 GB."""
BOUNDS = QueryBounds()
SCOPED = QueryBounds(scope_label="tenant")
UNREACHABLE = "http://127.0.0.1:9"  # nothing listens: a query that were sent would fail there


def test_the_issue_s_query_is_refused_for_each_thing_it_does_wrong():
    verdict = check_query(ISSUE_QUERY, BOUNDS)
    assert not verdict.allowed
    assert verdict.problems == (
        "the subquery range 10000d is longer than the 3600s allowed (OPSGATE_PROMQL_MAX_RANGE_S)",
        "the subquery step 1s is finer than the 10s allowed (OPSGATE_PROMQL_MIN_STEP_S)",
        'the selector {__name__=~".+"} matches __name__ with =~, which reads every metric it '
        "matches; name one metric",
    )
    assert verdict.reason.startswith("refused: the subquery range 10000d")
    assert "\n" not in verdict.reason


def test_a_selector_over_another_tenant_is_refused_when_queries_are_scoped():
    verdict = check_query('{tenant="other"}', SCOPED, "acme")
    assert 'the selector {tenant="other"} reads tenant="other"; this case\'s tenant is "acme"' \
        in verdict.problems
    assert not check_query('checkout_p95{tenant="other"}', SCOPED, "acme").allowed
    assert check_query('checkout_p95{tenant="acme"}', SCOPED, "acme").allowed


@pytest.mark.parametrize(("query", "problem"), [
    ("checkout_p95", 'the selector checkout_p95{} has no tenant="acme": every selector must '
                     "carry the case's tenant"),
    ('checkout_p95{tenant=~"acme|other"}', "reads tenant=~\"acme|other\""),
    ('checkout_p95{tenant!="acme"}', "reads tenant!=\"acme\""),
    ('checkout_p95{tenant="acme" or tenant="other"}', 'checkout_p95{tenant="other"} reads'),
    ('sum(rate(a{tenant="acme"}[5m])) / sum(rate(b[5m]))', "b{} has no tenant=\"acme\""),
])
def test_scoped_queries_fail_closed(query, problem):
    verdict = check_query(query, SCOPED, "acme")
    assert not verdict.allowed and problem in verdict.reason, verdict.reason


def test_a_scoped_query_without_a_case_scope_is_refused():
    verdict = check_query('up{tenant="acme"}', SCOPED, None)
    assert verdict.problems == ("the case has no tenant to scope the query to",)


@pytest.mark.parametrize(("query", "problem"), [
    ('{__name__!~"x", job="api"}', "matches __name__ with !~"),
    ('{__name__!="x", job="api"}', "matches __name__ with !="),
    ('{__name__!~"x"}', "not PromQL: vector selector must contain at least one non-empty"),
    ('{job="api"}', 'the selector {job="api"} names no metric'),
    ("rate(x[2h])", "the range 2h is longer than the 3600s allowed"),
    ("max_over_time(x[1h:1s])", "the subquery step 1s is finer than the 10s allowed"),
    ("max_over_time(x[2h:])", "the subquery range 2h is longer"),
    ("max_over_time(max_over_time(x[5m:1m])[10m:1m])", "a subquery inside a subquery"),
    ("rate(x[5m] offset 30d)", "the offset 30d looks further back than 7 days"),
    ("x @ 100", "@ a fixed time"),
    ("sum(x", "not PromQL: unclosed left parenthesis"),
    ("", "the query is empty"),
    ("x" * (MAX_QUERY_CHARS + 1), "characters long"),
    ("(" * 70 + "x" + ")" * 70, "nests brackets more than 64 deep"),
    ("rate(up[99999999y])", "out of range"),
])
def test_each_bound_refuses_with_a_sentence(query, problem):
    verdict = check_query(query, BOUNDS)
    assert not verdict.allowed and problem in verdict.reason, verdict.reason


@pytest.mark.parametrize("query", [
    "error_rate",
    "histogram_quantile(0.95, sum by (le) (rate(http_request_duration_seconds_bucket[5m]))) "
    "* 1000",
    'sum(rate(http_requests_total{code=~"5.."}[5m])) / sum(rate(http_requests_total[5m]))',
    'up{job="service"}',
    '{__name__="up"}',
    "max_over_time(x[1h:10s])",
    "max_over_time(x[30m:])",
    "rate(x[5m] offset 1d)",
    "x @ end()",
    "topk(3, x)",
    'count_values("v", x)',
    "scalar(min(x)) + 1",
    'label_replace(x, "a", "b", "c", "(")',  # Prometheus, not the check, refuses the regex
])
def test_what_an_operator_or_a_plan_usually_writes_is_allowed(query):
    assert check_query(query, BOUNDS).allowed, check_query(query, BOUNDS).reason


def test_the_bounds_are_settings():
    bounds = promql_bounds(Settings(_env_file=None, promql_max_range_s=86400,
                                    promql_min_step_s=1, promql_scope_label="namespace",
                                    promql_timeout_s=2.5))
    assert bounds == QueryBounds(max_range_s=86400, min_step_s=1, scope_label="namespace",
                                 timeout_s=2.5)
    assert promql_bounds(Settings(_env_file=None)) == QueryBounds()
    assert check_query("max_over_time(x[1d:1s])", bounds, "shop").problems == (
        'the selector x{} has no namespace="shop": every selector must carry the case\'s '
        "namespace",)


@pytest.mark.parametrize("label", ["", "1tenant", "__name__", "ten-ant", 'x"}'])
def test_a_scope_label_that_is_not_a_label_name_is_refused(label):
    with pytest.raises(ValueError, match="promql_scope_label"):
        Settings(_env_file=None, promql_scope_label=label)


def test_the_timeout_is_sent_as_seconds_prometheus_reads():
    assert [seconds_param(s) for s in (10.0, 0.5, 2.25, 1e-9, 300)] == [
        "10", "0.5", "2.25", "0.000000001", "300"]


def test_query_problems_locate_each_refused_check():
    block = parse_verify({"checks": [{"metric": 'up{service="payments-api"}', "above": 0},
                                     {"metric": ISSUE_QUERY, "below": 1e12},
                                     {"probe": {"url": "http://127.0.0.1/healthz"}}]})
    payments = [(("service", "payments-api"),)]
    [line] = query_problems(block, BOUNDS, None, payments)
    assert line.startswith("verify.checks[1].metric: refused: the subquery range 10000d")
    single = parse_verify({"metric": ISSUE_QUERY, "below": 1e12})
    assert query_problems(single, BOUNDS, None, payments)[0].startswith(
        "verify.metric: refused:")


# -- the readers refuse before sending ----------------------------------------------------------


def test_the_verifier_s_source_never_sends_a_refused_query():
    source = PrometheusSource(UNREACHABLE)
    with pytest.raises(QueryRefused, match="the query is refused: the subquery range 10000d"):
        source.read(ISSUE_QUERY)
    outcome = evaluate({"metric": ISSUE_QUERY, "below": 1e12}, source, UrlAllowList([]))
    assert outcome.state == "cannot"
    assert outcome.reason.startswith(f"cannot verify: {ISSUE_QUERY}: the query is refused:")


def test_the_verifier_s_source_reads_for_its_case_s_scope():
    source = PrometheusSource(UNREACHABLE, bounds=SCOPED)
    with pytest.raises(QueryRefused, match="no tenant to scope"):
        source.read('up{tenant="acme"}')
    with pytest.raises(QueryRefused, match="this case's tenant is \"acme\""):
        source.scoped("acme").read('up{tenant="other"}')
    with pytest.raises(EvidenceMissing, match="Prometheus unreachable"):  # allowed: it is sent
        source.scoped("acme").read('up{tenant="acme"}')
    stand_in = StaticSource({"up": 1.0})
    from core.evidence.scope import for_case as metrics_for_case
    assert metrics_for_case(stand_in, "acme") is stand_in  # a table sends no query


def test_the_analyst_s_source_never_sends_a_refused_query():
    source = PrometheusRangeSource(UNREACHABLE, before_s=300, after_s=60, step_s=15,
                                   bounds=SCOPED)
    spec = MetricSpec("everything", ISSUE_QUERY, "level", ("all",))
    at = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(QueryRefused, match="10000d"):
        for_case(source, "acme").read(spec, at)
    own = MetricSpec("errors", 'errors{tenant="acme"}', "level", ("error",))
    with pytest.raises(EvidenceMissing, match="Prometheus unreachable"):
        for_case(source, "acme").read(own, at + timedelta(seconds=1))


@pytest.mark.parametrize("status", [503, 422])
def test_prometheus_saying_it_timed_out_is_a_timeout(status):
    body = b'{"status":"error","errorType":"timeout","error":"query timed out in query queue"}'
    with pytest.raises(QueryTimedOut, match=f"timed out on the query \\(HTTP {status}\\)"):
        prometheus_answer(body, status)
    other = b'{"status":"error","errorType":"execution","error":"many-to-many matching"}'
    with pytest.raises(EvidenceMissing) as refused:
        prometheus_answer(other, 422)
    assert not isinstance(refused.value, QueryTimedOut)


# -- shapes a model could write (hypothesis) -----------------------------------------------------

NAMES = st.sampled_from(["up", "error_rate", "http_requests_total", "checkout_p95", "x", "a_b:c"])
LABELS = st.sampled_from(["job", "tenant", "code", "__name__", "namespace", "le"])
OPS = st.sampled_from(["=", "!=", "=~", "!~"])
VALUES = st.one_of(st.sampled_from([".+", ".*", "acme", "other", "5..", "", "a|b"]),
                   st.text(max_size=8))
UNITS = st.sampled_from(["ms", "s", "m", "h", "d", "w", "y"])
AMOUNTS = st.one_of(st.integers(0, 120), st.sampled_from([10000, 99999999, 2**40]))
DURATIONS = st.builds(lambda n, unit: f"{n}{unit}", AMOUNTS, UNITS)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


MATCHERS = st.lists(st.builds(lambda label, op, value: f"{label}{op}{_quoted(value)}",
                              LABELS, OPS, VALUES), max_size=3)
SELECTORS = st.builds(lambda name, matchers: f"{name}{{{', '.join(matchers)}}}",
                      st.one_of(NAMES, st.just("")), MATCHERS)


def _shapes(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """One layer a model wraps around an expression."""
    return st.one_of(
        st.builds(lambda e, d: f"rate({e}[{d}])", SELECTORS, DURATIONS),
        st.builds(lambda f, e, d: f"{f}({e}[{d}])",
                  st.sampled_from(["count_over_time", "max_over_time", "avg_over_time"]),
                  SELECTORS, DURATIONS),
        st.builds(lambda f, e, r, s: f"{f}(({e})[{r}:{s}])",
                  st.sampled_from(["max_over_time", "count_over_time", "min_over_time"]),
                  inner, DURATIONS, st.one_of(st.just(""), DURATIONS)),
        st.builds(lambda a, e: f"{a}({e})", st.sampled_from(["sum", "count", "max", "abs"]),
                  inner),
        st.builds(lambda a, op, b: f"{a} {op} {b}", inner, st.sampled_from(["+", "/", "or"]),
                  inner),
        st.builds(lambda e, d: f"{e} offset {d}", SELECTORS, DURATIONS),
        st.builds(lambda e, at: f"{e} @ {at}", SELECTORS,
                  st.sampled_from(["start()", "end()", "0", "1e18"])),
        st.builds(lambda e: f"topk(3, {e})", inner),
    )


QUERIES = st.recursive(st.one_of(SELECTORS, NAMES), _shapes, max_leaves=6)
ANYTHING = st.one_of(QUERIES, st.text(max_size=200),
                     st.builds(lambda q, cut: q[:cut], QUERIES, st.integers(0, 80)),
                     st.builds(lambda q, junk: q + junk, QUERIES,
                               st.text(alphabet="()[]{}:\"'`\\,@~!=", max_size=10)))
BOUNDED = st.builds(QueryBounds, max_range_s=st.sampled_from([60, 300, 3600, 86400]),
                    min_step_s=st.sampled_from([1, 10, 60]),
                    scope_label=st.sampled_from([None, "tenant", "namespace"]))
PROPERTY = settings(max_examples=500, deadline=None, derandomize=True,  # the same run each time
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(query=ANYTHING, bounds=BOUNDED, scope=st.sampled_from([None, "acme", ""]))
@example(query=ISSUE_QUERY, bounds=BOUNDS, scope=None)
@example(query='{tenant="other"}', bounds=SCOPED, scope="acme")
@example(query="rate(up[99999999y])", bounds=BOUNDS, scope=None)
def test_any_text_gets_a_verdict_never_an_exception(query, bounds, scope):
    verdict = check_query(query, bounds, scope)
    assert verdict.query == query
    assert verdict.allowed == (not verdict.problems)
    if verdict.allowed:
        assert verdict.reason == "allowed"
    else:
        assert verdict.reason.startswith("refused: ")
        assert all(problem.strip() for problem in verdict.problems)
        assert len(set(verdict.problems)) == len(verdict.problems)
    assert check_query(query, bounds, scope) == verdict  # the same text, the same verdict


@PROPERTY
@given(query=QUERIES, bounds=BOUNDED)
def test_a_loose_name_matcher_is_never_allowed(query, bounds):
    if any(f"__name__{op}" in query for op in ("=~", "!~", "!=")):
        assert not check_query(query, bounds, "acme").allowed


@PROPERTY
@given(query=QUERIES, n=st.integers(2, 400))
def test_a_range_over_the_bound_is_never_allowed(query, n):
    bounds = QueryBounds(max_range_s=3600)
    long = f"max_over_time(({query})[{n}h:])"
    assert not check_query(long, bounds).allowed
    assert not check_query(f"rate(up[{n * 60}m])", bounds).allowed


@PROPERTY
@given(selector=SELECTORS)
def test_a_scoped_selector_is_allowed_only_carrying_the_case_s_value(selector):
    verdict = check_query(f"sum(rate({selector}[5m]))", SCOPED, "acme")
    if verdict.allowed:
        assert 'tenant="acme"' in selector


SAFE_SELECTORS = st.builds(lambda name, job: f'{name}{{tenant="acme", job="{job}"}}', NAMES,
                           st.sampled_from(["api", "web"]))
SAFE_DURATIONS = st.builds(lambda n, unit: f"{n}{unit}", st.integers(1, 59),
                           st.sampled_from(["s", "m"]))


def _safe(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(lambda e, d: f"rate({e}[{d}])", SAFE_SELECTORS, SAFE_DURATIONS),
        st.builds(lambda a, e: f"{a}({e})", st.sampled_from(["sum", "max", "abs"]), inner),
        st.builds(lambda a, op, b: f"({a}) {op} ({b})", inner, st.sampled_from(["+", "/"]),
                  inner),
    )


@PROPERTY
@given(query=st.recursive(SAFE_SELECTORS, _safe, max_leaves=6))
def test_a_query_of_allowed_parts_is_allowed(query):
    assert check_query(query, SCOPED, "acme").allowed, check_query(query, SCOPED, "acme").reason
