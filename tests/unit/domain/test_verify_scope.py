"""A verify check must measure the service (issue 40): its PromQL selects the series of one of the
case's components (``core/domain/promql.py``'s ``check_component_query``, the rule of the
investigator's ``query_metrics``). A constant, a function of constants or a selector outside the
component is refused with one sentence; on the issue's payload and on shapes a model could write
(hypothesis), against what the generator itself knows it wrote."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.domain.promql import NO_COMPONENT, QueryBounds, check_component_query, metric_names
from core.domain.verify import parse_verify, query_problems

BOUNDS = QueryBounds()
PAYMENTS = (("service", "payments-api"),)
SEARCH = (("service", "search-api"),)
PROPERTY = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("query", [
    "vector(0)", "time()", "1+1", "-(1)", "sum(vector(1))", "scalar(vector(1))",
    "vector(0) or vector(1)", "time() - 60", "1 > bool 0", "abs(vector(-1))",
    'label_replace(vector(1), "service", "payments-api", "", "")',
])
def test_a_query_that_reads_no_series_measures_nothing_and_is_refused(query):
    verdict, _labels = check_component_query(query, BOUNDS, None, [PAYMENTS])
    assert verdict.problems == (
        "the query reads no series: a constant or a function of constants (vector(0), time(), "
        "1 + 1) measures nothing; select the component's series, with "
        'service="payments-api"',)


def test_the_issue_s_verify_is_refused_before_the_gate_in_one_sentence():
    block = parse_verify({"metric": "vector(0)", "below": 1})
    [line] = query_problems(block, BOUNDS, None, [PAYMENTS])
    assert line.startswith("verify.metric: refused: the query reads no series")
    assert "\n" not in line


def test_a_selector_outside_the_component_is_refused_saying_what_to_add():
    block = parse_verify({"checks": [{"metric": "http_requests_total", "below": 1},
                                     {"metric": 'up{service="search-api"}', "above": 0}]})
    unscoped, other = query_problems(block, BOUNDS, None, [PAYMENTS])
    assert unscoped == ('verify.checks[0].metric: refused: add service="payments-api" to '
                        "http_requests_total: its selector http_requests_total{} reads beyond "
                        "this component's series")
    assert other.startswith('verify.checks[1].metric: refused: add service="payments-api" to up')


def test_a_check_may_read_any_one_of_the_case_s_components():
    verdict, labels = check_component_query('up{service="search-api"}', BOUNDS, None,
                                            [PAYMENTS, SEARCH])
    assert verdict.allowed and labels == SEARCH
    mixed, _ = check_component_query('up{service="search-api"} / up{service="payments-api"}',
                                     BOUNDS, None, [PAYMENTS, SEARCH])
    assert not mixed.allowed  # one check measures one component


def test_a_case_with_no_component_has_no_series_to_read():
    verdict, labels = check_component_query('up{service="payments-api"}', BOUNDS, None, [])
    assert verdict.problems == (NO_COMPONENT,) and labels == ()
    block = parse_verify({"metric": 'up{service="payments-api"}', "below": 1})
    assert query_problems(block, BOUNDS, None, []) == [f"verify.metric: refused: {NO_COMPONENT}"]


def test_the_metrics_a_query_reads_are_named_once_each():
    assert metric_names('sum(rate(a{service="p"}[5m])) / sum(b{service="p"}) + a{service="p"}'
                        ' or {__name__="c", service="p"}') == ("a", "b", "c")
    assert metric_names("vector(0)") == () and metric_names("not ((promql") == ()


# -- property: shapes a model could write, each knowing whether it reads the component ----------

Shape = tuple[str, bool, bool]
"""A query, whether it has a selector, and whether every selector it has carries PAYMENTS."""

CONSTANTS: st.SearchStrategy[Shape] = st.sampled_from(
    ["vector(0)", "time()", "1", "0.5", "vector(1)", "scalar(vector(0))", "-1", "(2)"],
).map(lambda text: (text, False, True))
SELECTORS: st.SearchStrategy[Shape] = st.builds(
    lambda name, matchers, own: (f"{name}{{{matchers}}}", True, own),
    st.sampled_from(["http_requests_total", "up", "latency_seconds"]),
    st.sampled_from(['service="payments-api"', 'service="payments-api", code="500"',
                     'code="500", service="payments-api"']),
    st.just(True),
) | st.builds(
    lambda name, matchers: (f"{name}{{{matchers}}}" if matchers else name, True, False),
    st.sampled_from(["http_requests_total", "up"]),
    st.sampled_from(["", 'service="search-api"', 'service=~"payments-api"',
                     'service!="search-api"', 'code="500"', 'service="payments-api "']),
)


def _combine(inner: st.SearchStrategy[Shape]) -> st.SearchStrategy[Shape]:
    def binary(a: Shape, op: str, b: Shape) -> Shape:
        return f"({a[0]}) {op} ({b[0]})", a[1] or b[1], a[2] and b[2]

    def wrap(template: str) -> st.SearchStrategy[Shape]:
        return inner.map(lambda e: (template.format(e[0]), e[1], e[2]))

    ranged = SELECTORS.map(lambda e: (f"rate({e[0]}[5m])", e[1], e[2]))
    return st.one_of(
        st.builds(binary, inner, st.sampled_from(["or", "+", "/", "and", "> bool"]), inner),
        wrap("sum({})"), wrap("abs({})"), wrap("topk(1, {})"),
        wrap('label_replace({}, "service", "payments-api", "", "")'), ranged)


SHAPES = st.recursive(CONSTANTS | SELECTORS, _combine, max_leaves=4)


@PROPERTY
@given(shape=SHAPES)
@example(shape=("vector(0)", False, True))
@example(shape=('count(up{service="payments-api"}) or vector(0)', True, True))
def test_a_check_is_allowed_exactly_when_it_reads_only_the_component_s_series(shape):
    query, reads, own = shape
    verdict, labels = check_component_query(query, BOUNDS, None, [PAYMENTS])
    if "not PromQL" in verdict.reason:
        return  # a scalar where the grammar wants a vector (sum(1)): refused by the parser
    assert verdict.allowed == (reads and own), (query, verdict.reason)
    if verdict.allowed:
        assert labels == PAYMENTS and metric_names(query)
    else:
        assert verdict.reason.startswith("refused: ") and "\n" not in verdict.reason
