"""The PromQL check with a component's required labels (core/domain/promql.py, issue 28): every
selector must carry each ``label="value"`` as an equality matcher, refused (never rewritten)
with a sentence saying what to add where; on the issue's payloads and on hostile shapes a model
could write (hypothesis), against an independent walk of the parsed query."""

from __future__ import annotations

import promql_parser as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.domain.promql import QueryBounds, check_query

BOUNDS = QueryBounds()
SCOPED = QueryBounds(scope_label="tenant")
PAYMENTS = (("service", "payments-api"),)
TWO = (("env", "prod"), ("service", "payments-api"))
PROPERTY = settings(max_examples=400, deadline=None, derandomize=True,  # the same run each time
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(("query", "sentence"), [
    ("http_requests_total",
     'add service="payments-api" to http_requests_total: its selector http_requests_total{} '
     "reads beyond this component's series"),
    ('http_requests_total{code="500"}',
     'add service="payments-api" to http_requests_total: its selector '
     'http_requests_total{code="500"} reads beyond this component\'s series'),
    ('http_requests_total{service="orders-api"}',
     'add service="payments-api" to http_requests_total: its selector '
     'http_requests_total{service="orders-api"} reads service="orders-api"; only this '
     "component's series may be read"),
    ('{__name__="up"}',
     'add service="payments-api" to up: its selector {__name__="up"} reads beyond this '
     "component's series"),
])
def test_a_selector_without_the_component_s_label_is_refused_saying_what_to_add(query, sentence):
    verdict = check_query(query, BOUNDS, labels=PAYMENTS)
    assert verdict.problems == (sentence,)


@pytest.mark.parametrize(("query", "fragment"), [
    ('x{service=~"payments-api"}', 'reads service=~"payments-api"'),  # a regex is not equality
    ('x{service=~".*"}', 'reads service=~".*"'),
    ('x{service!="orders-api"}', 'reads service!="orders-api"'),
    ('x{service="payments-api" or service="orders-api"}', 'x{service="orders-api"} reads'),
    ('x{service="payments-api" or code="500"}', 'its selector x{code="500"} reads beyond'),
    ('x{service="payments-api"} or y', "add service=\"payments-api\" to y"),
    ('x{service="payments-api"} / on() group_left y{job="api"}', "to y"),
    ('sum(rate(x{service="payments-api"}[5m])) / sum(rate(y[5m]))', "to y"),
    ('label_replace(x{service="orders-api"}, "service", "payments-api", "", "")',
     'reads service="orders-api"'),
    ('max_over_time(x[30m:1m]) and x{service="payments-api"}', "to x: its selector x{}"),
    ('absent(x{service="Payments-API"})', 'reads service="Payments-API"'),
    ('x{service="payments-api "}', 'reads service="payments-api "'),
    ('x{Service="payments-api"}', "reads beyond"),  # label names are case-sensitive
])
def test_hostile_shapes_are_refused(query, fragment):
    verdict = check_query(query, BOUNDS, labels=PAYMENTS)
    assert not verdict.allowed and fragment in verdict.reason, verdict.reason


@pytest.mark.parametrize("query", [
    'x{service="payments-api"}',
    '{__name__="x", service="payments-api"}',
    'sum by (code) (rate(http_requests_total{service="payments-api", code=~"5.."}[5m]))',
    'x{service="payments-api", service!="orders-api"}',  # more matchers only narrow
    'x{service="payments-api", service=~"pay.*"}',
    'x{service="payments-api", code="1" or service="payments-api", code="2"}',
    'count(x{service="payments-api"}) or vector(0)',
])
def test_selectors_carrying_the_component_s_label_are_allowed(query):
    assert check_query(query, BOUNDS, labels=PAYMENTS).allowed


def test_every_required_label_is_named_in_one_sentence():
    verdict = check_query('x{service="payments-api"}', BOUNDS, labels=TWO)
    assert verdict.problems == ('add env="prod" to x: its selector x{service="payments-api"} '
                                "reads beyond this component's series",)
    both = check_query("x", BOUNDS, labels=TWO)
    assert both.problems[0].startswith('add env="prod", service="payments-api" to x:')
    assert check_query('x{env="prod", service="payments-api"}', BOUNDS, labels=TWO).allowed


def test_a_selector_without_a_metric_name_is_told_by_its_selector():
    verdict = check_query('{job="api"}', BOUNDS, labels=PAYMENTS)
    assert 'add service="payments-api" to the selector {job="api"}' in verdict.reason


def test_the_labels_add_to_the_tenant_scope_and_the_other_bounds():
    verdict = check_query("rate(x[2h])", SCOPED, "acme", PAYMENTS)
    assert len(verdict.problems) == 3
    assert 'x{service="payments-api", tenant="acme"}' in _allowed_form()
    assert check_query(_allowed_form(), SCOPED, "acme", PAYMENTS).allowed
    assert not check_query(_allowed_form(), SCOPED, "other", PAYMENTS).allowed


def _allowed_form() -> str:
    return 'rate(x{service="payments-api", tenant="acme"}[5m])'


@pytest.mark.parametrize(("labels", "problem"), [
    ((("service", ""),), "the component's metric label service has no value"),
    ((("app.kubernetes.io/name", "x"),), "is not a label name a query can carry"),
    ((("__name__", "x"),), "is not a label name a query can carry"),
    ((("", "x"),), "is not a label name a query can carry"),
])
def test_labels_no_selector_could_carry_refuse_every_query(labels, problem):
    for query in ('x{service=""}', "vector(1)", 'x{__name__="x"}'):
        verdict = check_query(query, BOUNDS, labels=labels)
        assert not verdict.allowed and problem in verdict.reason


def test_no_labels_checks_as_before():
    assert check_query("x", BOUNDS).allowed
    assert check_query("x", BOUNDS, labels=()).allowed


def test_a_value_is_compared_as_prometheus_reads_it_and_shown_on_one_line():
    labels = (("service", 'pay"me\\nts\n'),)
    assert check_query(r'x{service="pay\"me\\nts\n"}', BOUNDS, labels=labels).allowed
    verdict = check_query("x", BOUNDS, labels=labels)
    assert verdict.problems[0].startswith(r'add service="pay\"me\\nts\n" to x')
    assert "\n" not in verdict.reason


# -- properties: an independent walk of the parsed query ------------------------------------------


def _selector_sets(query: str) -> list[list[pq.Matcher]] | None:
    """Every matcher set of every vector selector in ``query`` (recursively, unlike the check);
    None when it is not PromQL."""
    try:
        root = pq.parse(query)
    except BaseException as exc:  # pyo3's panics derive from BaseException
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None
    found: list[list[pq.Matcher]] = []

    def visit(node: object) -> None:
        if isinstance(node, pq.VectorSelector):
            found.extend(node.matchers.or_matchers or [node.matchers.matchers])
            return
        for child in ("expr", "lhs", "rhs", "vector_selector", "param"):
            value = getattr(node, child, None)
            if isinstance(value, pq.Expr):
                visit(value)
        for arg in getattr(node, "args", None) or ():
            visit(arg)

    visit(root)
    return found


def _carries(matchers: list[pq.Matcher], labels: tuple[tuple[str, str], ...]) -> bool:
    return all(any(m.name == key and m.value == value and m.op == pq.MatchOp.Equal
                   for m in matchers) for key, value in labels)


# Selectors as a model or an attacker writes them around the component's label.
SERVICE_VALUES = st.one_of(st.sampled_from(["payments-api", "orders-api", "", ".*", ".+",
                                            "payments-api|orders-api", "PAYMENTS-API",
                                            "payments-api ", 'payments-api"}', "payments-api\\"]),
                           st.text(max_size=6))
HOSTILE_MATCHERS = st.builds(
    lambda label, op, value: f"{label}{op}{_quoted(value)}",
    st.sampled_from(["service", "service", "code", "Service", "__name__", "job"]),
    st.sampled_from(["=", "=", "!=", "=~", "!~"]), SERVICE_VALUES)
HOSTILE_SELECTORS = st.builds(
    lambda name, sets: f"{name}{{{' or '.join(', '.join(s) for s in sets)}}}",
    st.sampled_from(["x", "http_requests_total", "", "up"]),
    st.lists(st.lists(HOSTILE_MATCHERS, max_size=3), min_size=1, max_size=3))


def _wrap(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(lambda e: f"sum({e})", inner),
        st.builds(lambda e: f"rate({e}[5m])", HOSTILE_SELECTORS),
        st.builds(lambda e: f"max_over_time(({e})[10m:1m])", inner),
        st.builds(lambda a, op, b: f"({a}) {op} ({b})", inner,
                  st.sampled_from(["or", "and", "unless", "/", "+ on() group_left"]), inner),
        st.builds(lambda e: f'label_replace({e}, "service", "payments-api", "", "")', inner),
        st.builds(lambda e: f"absent({e})", inner),
        st.builds(lambda e: f"{e} offset 1h", HOSTILE_SELECTORS),
    )


HOSTILE = st.recursive(HOSTILE_SELECTORS, _wrap, max_leaves=5)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@PROPERTY
@given(query=HOSTILE)
@example(query='x{service="payments-api"} or y{service="orders-api"}')
@example(query='x{service="payments-api" or service=~".*"}')
def test_an_allowed_query_reads_only_series_carrying_the_labels(query):
    verdict = check_query(query, BOUNDS, labels=PAYMENTS)
    if verdict.allowed:
        sets = _selector_sets(query)
        assert sets is not None
        assert all(_carries(matchers, PAYMENTS) for matchers in sets), query
    else:
        assert verdict.reason.startswith("refused: ") and "\n" not in verdict.reason


@PROPERTY
@given(query=HOSTILE)
def test_required_labels_never_widen_what_is_allowed(query):
    if check_query(query, BOUNDS, labels=PAYMENTS).allowed:
        assert check_query(query, BOUNDS).allowed
    if check_query(query, SCOPED, "acme", PAYMENTS).allowed:
        assert check_query(query, SCOPED, "acme").allowed


@PROPERTY
@given(query=HOSTILE)
def test_each_refusal_names_what_to_add(query):
    verdict = check_query(query, BOUNDS, labels=PAYMENTS)
    sets = _selector_sets(query)
    if sets is None or check_query(query, BOUNDS).problems:
        return  # refused for another reason (not PromQL, no metric name)
    lacking = [m for m in sets if not _carries(m, PAYMENTS)]
    assert verdict.allowed == (not lacking)
    if lacking:
        assert all(p.startswith('add service="payments-api" to ') for p in verdict.problems)


@PROPERTY
@given(value=st.text(min_size=1, max_size=12), name=st.sampled_from(["x", "up", "a_b:c"]))
def test_any_value_is_carried_exactly_when_written_exactly(value, name):
    labels = (("service", value),)
    assert check_query(f"{name}{{service={_quoted(value)}}}", BOUNDS, labels=labels).allowed
    other = value + "x"
    assert not check_query(f"{name}{{service={_quoted(other)}}}", BOUNDS, labels=labels).allowed
