"""Which PromQL opsgate may send to Prometheus: one check, taken before any query leaves (a plan's
verify metric at ``plan_ready`` and again at each reading; the analyst's catalog queries), on the
expression as parsed by ``promql-parser`` (Prometheus' grammar, in Rust). Pure: the readers in
``core/evidence/prometheus.py`` and ``core/analysis/sources.py`` send what it allows, with
Prometheus' own ``timeout`` (``QueryBounds.timeout_s``).

Refused, each with a sentence saying why:

- text that is not PromQL, longer than ``MAX_QUERY_CHARS`` or nested deeper than ``MAX_DEPTH``;
- a selector that does not name one metric: a ``__name__`` matcher other than ``=``
  (``{__name__=~".+"}``, ``__name__!~…``), or no metric name at all (``{job="api"}``): both read
  every metric there is;
- a range longer than ``max_range_s`` (``x[1d]``, a subquery's ``[10000d:1s]``); a subquery step
  finer than ``min_step_s`` (``[5m:1s]``; a subquery without a step is evaluated at the server's
  evaluation interval, and allowed); a subquery inside a subquery (their costs multiply); an
  ``offset`` further back than ``MAX_OFFSET_S``; ``@`` a fixed time (``@ start()``/``end()`` are
  the query's own times, and allowed);
- with a scope label (``scope_label``, e.g. ``tenant``): a selector that does not carry
  ``<label>="<the case's value>"``. Fail closed: a selector without the label is refused, not
  rewritten, so the approver reads exactly what is sent. Other matchers on the label only narrow
  the selection and are allowed; with ``or`` between matcher sets, each set must carry it;
- with required labels (``labels``: a catalog component's metric labels, ``service=payments-api``):
  a selector that does not carry each as an equality matcher (``service="payments-api"``),
  refused the same way, fail closed; the sentence says what to add to which metric, so a model
  can fix its own query. Required labels that no selector could carry (not a label name, an
  empty value) refuse every query. With them, a query that reads no series at all (a constant,
  ``vector(0)``, ``time()``, ``1 + 1``) is refused too: it measures nothing of the
  component, whatever it answers.

``metric_names`` says which metrics a query reads (the verifier asks whether the component has
series of them at the reading: a check that read none is not a pass).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import promql_parser as pq

MAX_QUERY_CHARS = 2000
"""As long as a plan's ``metric`` may be (``core/domain/verify.py``)."""
MAX_DEPTH = 64
"""Brackets nested deeper than this are refused before parsing: no model writes them."""
MAX_OFFSET_S = 7 * 86400
"""How far back an ``offset`` may look: a week-over-week comparison, no further."""
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_RANGE_S = 3600
DEFAULT_MIN_STEP_S = 10
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class QueryBounds:
    """How far a query may reach and how long Prometheus may spend on it (settings
    ``OPSGATE_PROMQL_*``; ``core.evidence.configured.promql_bounds``)."""

    max_range_s: float = DEFAULT_MAX_RANGE_S
    min_step_s: float = DEFAULT_MIN_STEP_S
    scope_label: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class QueryVerdict:
    """The check of one query: allowed, or refused with every problem found."""

    query: str
    problems: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.problems

    @property
    def reason(self) -> str:
        """One line: ``allowed``, or ``refused: <problem>; <problem>``."""
        return "allowed" if self.allowed else "refused: " + "; ".join(self.problems)


def check_query(query: str, bounds: QueryBounds, scope: str | None = None,
                labels: Labels = ()) -> QueryVerdict:
    """Whether ``query`` may be sent for a case whose scope value (its tenant) is ``scope``,
    reading only the series that carry every one of ``labels`` (a component's metric labels).
    Never raises: whatever the text, the answer is a verdict."""
    if not isinstance(query, str):
        return QueryVerdict(str(query), ("the query must be text",))
    if not query.strip():
        return QueryVerdict(query, ("the query is empty",))
    if len(query) > MAX_QUERY_CHARS:
        return QueryVerdict(query, (f"the query is {len(query)} characters long; at most "
                                    f"{MAX_QUERY_CHARS} are sent",))
    if _depth(query) > MAX_DEPTH:
        return QueryVerdict(query, (f"the query nests brackets more than {MAX_DEPTH} deep",))
    if bounds.scope_label is not None and not scope:
        return QueryVerdict(query, (f"the case has no {bounds.scope_label} to scope the query to",))
    unusable = _unusable(labels)
    if unusable:
        return QueryVerdict(query, (unusable,))
    try:
        expr = pq.parse(query)
    except Exception as exc:  # the parser's ValueError, and a Rust panic surfacing as one
        return QueryVerdict(query, (f"not PromQL: {_first_line(exc)}",))
    except BaseException as exc:  # pyo3's PanicException derives from BaseException
        if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
            raise
        return QueryVerdict(query, (f"not PromQL: {_first_line(exc)}",))
    try:
        found = _walk(expr, bounds, scope, labels)
    except (ValueError, OverflowError) as exc:  # a duration Python's timedelta cannot hold
        return QueryVerdict(query, (f"a value in the query is out of range: {_first_line(exc)}",))
    if labels and not _selectors(expr):
        found.append(_reads_nothing(labels))
    problems: list[str] = []
    for problem in found:
        if problem not in problems:
            problems.append(problem)
    return QueryVerdict(query, tuple(problems))


NO_COMPONENT = ("the case names no component whose series a check could read: name its "
                "components (a metric check must select a component's series), or set "
                "OPSGATE_DEFAULT_METRIC_LABELS")


def check_component_query(query: str, bounds: QueryBounds, scope: str | None,
                          components: Sequence[Labels]) -> tuple[QueryVerdict, Labels]:
    """``check_query`` for a query that must read the series of one of ``components`` (each its
    metric labels): the verdict under the first whose series it selects, and those labels; else
    the verdict under the first component (what to add to select its series). Fail closed: no
    component, no query (its other problems said first)."""
    if not components:
        unscoped = check_query(query, bounds, scope)
        return QueryVerdict(unscoped.query, (*unscoped.problems, NO_COMPONENT)), ()
    verdicts = [check_query(query, bounds, scope, labels) for labels in components]
    for verdict, labels in zip(verdicts, components, strict=True):
        if verdict.allowed:
            return verdict, labels
    return verdicts[0], components[0]


def metric_names(query: str) -> tuple[str, ...]:
    """The metric names the selectors of ``query`` read, in order, each once; empty for text that
    is not PromQL or reads no series. Only meaningful for a query ``check_query`` allowed."""
    try:
        expr = pq.parse(query)
    except BaseException as exc:  # as in check_query: the parser's errors and its panics
        if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
            raise
        return ()
    names: list[str] = []
    for node in _selectors(expr):
        for matchers in node.matchers.or_matchers or [node.matchers.matchers]:
            named = node.name or next((m.value for m in matchers if m.name == "__name__"
                                       and m.op == pq.MatchOp.Equal), None)
            if named and named not in names:
                names.append(named)
    return tuple(names)


def seconds_param(seconds: float) -> str:
    """A duration as Prometheus' API reads it (a float number of seconds): ``10``, ``0.5``."""
    text = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return text or "0"


def _walk(root: pq.Expr, bounds: QueryBounds, scope: str | None, labels: Labels) -> list[str]:
    """Every problem of the expression tree; iterative, so no tree is too deep to walk."""
    problems: list[str] = []
    stack: list[tuple[object, int]] = [(root, 0)]  # (node, subqueries around it)
    while stack:
        node, subqueries = stack.pop()
        if isinstance(node, pq.NumberLiteral | pq.StringLiteral):
            continue
        if isinstance(node, pq.VectorSelector):
            problems += _selector(node, bounds, scope, labels)
        elif isinstance(node, pq.MatrixSelector):
            problems += _range("the range", node.range, bounds)
            stack.append((node.vector_selector, subqueries))
        elif isinstance(node, pq.SubqueryExpr):
            problems += _subquery(node, bounds, subqueries)
            stack.append((node.expr, subqueries + 1))
        elif isinstance(node, pq.Call):
            stack += [(arg, subqueries) for arg in node.args]
        elif isinstance(node, pq.AggregateExpr):
            stack.append((node.expr, subqueries))
            if isinstance(node.param, pq.Expr):
                stack.append((node.param, subqueries))
        elif isinstance(node, pq.BinaryExpr):
            stack += [(node.lhs, subqueries), (node.rhs, subqueries)]
        elif isinstance(node, pq.UnaryExpr | pq.ParenExpr):
            stack.append((node.expr, subqueries))
        else:  # a construct this check does not know: not sent
            problems.append(f"a {type(node).__name__} is not a part of PromQL opsgate sends")
    return problems


def _selectors(root: pq.Expr) -> list[pq.VectorSelector]:
    """Every selector of the expression tree, in reading order (iteratively, as ``_walk``)."""
    found: list[pq.VectorSelector] = []
    stack: list[object] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, pq.VectorSelector):
            found.append(node)
        elif isinstance(node, pq.MatrixSelector):
            stack.append(node.vector_selector)
        elif isinstance(node, pq.SubqueryExpr | pq.UnaryExpr | pq.ParenExpr):
            stack.append(node.expr)
        elif isinstance(node, pq.Call):
            stack += reversed(node.args)
        elif isinstance(node, pq.AggregateExpr):
            stack += [p for p in (node.param, node.expr) if isinstance(p, pq.Expr)]
        elif isinstance(node, pq.BinaryExpr):
            stack += [node.rhs, node.lhs]
    return found


def _reads_nothing(labels: Labels) -> str:
    """Why a query without a selector is refused when it must read a component's series."""
    wanted = ", ".join(f"{key}={quoted(value)}" for key, value in labels)
    return ("the query reads no series: a constant or a function of constants (vector(0), "
            f"time(), 1 + 1) measures nothing; select the component's series, with {wanted}")


def _selector(node: pq.VectorSelector, bounds: QueryBounds, scope: str | None,
              labels: Labels) -> list[str]:
    problems = _modifiers(node.offset, node.at)
    sets = node.matchers.or_matchers or [node.matchers.matchers]
    for matchers in sets:
        shown = _shown(node.name, matchers)
        names = [m for m in matchers if m.name == "__name__"]
        loose = [m for m in names if m.op != pq.MatchOp.Equal]
        if loose:
            problems.append(f"the selector {shown} matches __name__ with {_op(loose[0].op)}, "
                            "which reads every metric it matches; name one metric")
        elif node.name is None and not names:
            problems.append(f"the selector {shown} names no metric; name one metric")
        if bounds.scope_label is not None:
            problems += _scoped(shown, matchers, bounds.scope_label, scope)
        if labels:
            problems += _carries(node.name, shown, matchers, labels)
    return problems


def _unusable(labels: Labels) -> str | None:
    """Why required ``labels`` cannot scope a query, or None: a selector can carry only a label
    name with a value (``x=""`` would select the series *without* the label)."""
    for name, value in labels:
        if not LABEL_NAME.fullmatch(name) or name == "__name__":
            return f"the component's metric label {_cut(name, 60)!r} is not a label name a query " \
                   "can carry; fix the catalog's metric labels"
        if not value:
            return f"the component's metric label {name} has no value; fix the catalog's metric " \
                   "labels"
    return None


def _carries(name: str | None, shown: str, matchers: list[pq.Matcher],
             labels: Labels) -> list[str]:
    """``add service="payments-api" to http_requests_total: …`` when one of ``labels`` is not
    among the selector's equality matchers."""
    equal = {(m.name, m.value) for m in matchers if m.op == pq.MatchOp.Equal}
    lacking = [(key, value) for key, value in labels if (key, value) not in equal]
    if not lacking:
        return []
    wanted = ", ".join(f"{key}={quoted(value)}" for key, value in lacking)
    metric = name or next((m.value for m in matchers if m.name == "__name__"), None)
    where = _cut(metric, 120) if metric else f"the selector {shown}"
    keys = {key for key, _ in lacking}
    other = [m for m in matchers if m.name in keys]  # the label, but not the component's value
    if other:
        why = (f"its selector {shown} reads {', '.join(_matcher(m) for m in other)}; only this "
               "component's series may be read")
    else:
        why = f"its selector {shown} reads beyond this component's series"
    return [f"add {wanted} to {where}: {why}"]


def _scoped(shown: str, matchers: list[pq.Matcher], label: str, scope: str | None) -> list[str]:
    if any(m.name == label and m.op == pq.MatchOp.Equal and m.value == scope for m in matchers):
        return []
    named = [m for m in matchers if m.name == label]
    if not named:
        return [f"the selector {shown} has no {label}={quoted(scope or '')}: every selector "
                f"must carry the case's {label}"]
    return [f"the selector {shown} reads {', '.join(_matcher(m) for m in named)}; "
            f"this case's {label} is {quoted(scope or '')}"]


def _subquery(node: pq.SubqueryExpr, bounds: QueryBounds, around: int) -> list[str]:
    problems = _modifiers(node.offset, node.at)
    if around:
        problems.append("a subquery inside a subquery multiplies its cost; use one")
    if node.range is not None:
        problems += _range("the subquery range", node.range, bounds)
    if node.step is not None and node.step.total_seconds() < bounds.min_step_s:
        problems.append(f"the subquery step {_duration(node.step)} is finer than the "
                        f"{bounds.min_step_s:g}s allowed (OPSGATE_PROMQL_MIN_STEP_S)")
    return problems


def _range(what: str, span: timedelta, bounds: QueryBounds) -> list[str]:
    if span.total_seconds() <= bounds.max_range_s:
        return []
    return [f"{what} {_duration(span)} is longer than the {bounds.max_range_s:g}s allowed "
            "(OPSGATE_PROMQL_MAX_RANGE_S)"]


def _modifiers(offset: timedelta | None, at: pq.AtModifier | None) -> list[str]:
    problems = []
    if offset is not None and abs(offset.total_seconds()) > MAX_OFFSET_S:
        problems.append(f"the offset {_duration(abs(offset))} looks further back than "
                        f"{MAX_OFFSET_S // 86400} days")
    if at is not None and at.type == pq.AtModifierType.At:
        problems.append("@ a fixed time reads any moment of the past; use the reading's own time")
    return problems


def _depth(query: str) -> int:
    """How deep brackets nest outside quoted text (an unclosed quote counts to the end)."""
    depth = deepest = 0
    quote: str | None = None
    escaped = False
    for char in query:
        if quote is not None:
            if escaped:
                escaped = False
            elif char == "\\" and quote != "`":
                escaped = True
            elif char == quote:
                quote = None
        elif char in "\"'`":
            quote = char
        elif char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth = max(0, depth - 1)
    return deepest


def _duration(span: timedelta) -> str:
    try:
        return pq.display_duration(span)
    except Exception:  # a duration the parser's own printer does not take: say it in seconds
        return f"{span.total_seconds():g}s"


def _op(op: pq.MatchOp) -> str:
    for known, shown in _OPS:  # the parser's MatchOp compares, but does not hash
        if op == known:
            return shown
    return "?"


_OPS = ((pq.MatchOp.Equal, "="), (pq.MatchOp.NotEqual, "!="), (pq.MatchOp.Re, "=~"),
        (pq.MatchOp.NotRe, "!~"))


def _shown(name: str | None, matchers: list[pq.Matcher]) -> str:
    return _cut(name or "", 120) + "{" + _cut(", ".join(map(_matcher, matchers)), 120) + "}"


def _matcher(matcher: pq.Matcher) -> str:
    return f"{matcher.name}{_op(matcher.op)}{quoted(matcher.value)}"


def quoted(value: str) -> str:
    """A label value as PromQL (and Alertmanager's matchers) write it: ``"pay\\"ments"``."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return _cut(lines[0] if lines else type(exc).__name__, 200)
