"""The thread line of each alert note (pure): the core's plain words with the graph as a link, as
the bot draws them in Slack, and the graph link as it may be stored and shown: credentials
stripped, only http(s), Slack's control characters escaped."""

from __future__ import annotations

import pytest

from bot.mrkdwn import drawn
from core.alerts.model import without_credentials
from core.chat import Link, plain
from core.consumers.notifier import Notifier, render
from core.consumers.notifier_text import alert_text
from core.domain.messages import Topic

GRAPH = "http://prom.example.org:9090/graph?g0.expr=up&g0.tab=1"
ALERT = {"alertname": "checkout_p95", "summary": "p95 above 2s on web-1", "url": GRAPH}


@pytest.mark.parametrize(("payload", "line"), [
    ({"event": "alert_resolved", **ALERT},
     f"checkout_p95 resolved: p95 above 2s on web-1 <{GRAPH}|graph>"),
    ({"event": "alert_new", **ALERT},
     f"New alert in this group: checkout_p95: p95 above 2s on web-1 <{GRAPH}|graph>"),
    ({"event": "alert_recurrence", "recurrence": 3, "title": "checkout_p95: slow",
      "previous_case_id": "0f1e2d3c-0000-4000-8000-000000000000", "alerts": [ALERT]},
     f"Recurrence 3 of checkout_p95: slow; previous case 0f1e2d3c <{GRAPH}|graph>"),
    ({"event": "alert_firing", "alerts": [ALERT]},
     f"Firing: checkout_p95: p95 above 2s on web-1 <{GRAPH}|graph>"),
    ({"event": "alert_resolved", "alertname": "checkout_p95", "summary": "", "url": ""},
     "checkout_p95 resolved"),
])
def test_each_alert_note_is_one_line_with_its_graph_link(payload, line):
    said = render(Topic.ALERT_NOTED, payload)
    assert said is not None and drawn(said) == line
    assert Topic.ALERT_NOTED in Notifier.topics


def test_the_core_says_the_line_in_plain_words_and_the_graph_as_a_link():
    said = render(Topic.ALERT_NOTED, {"event": "alert_new", **ALERT})
    assert said is not None and said[-1] == Link(GRAPH, "graph")
    assert plain(said) == ("New alert in this group: checkout_p95: p95 above 2s on web-1 "
                           f"graph ({GRAPH})")


def test_a_firing_line_names_three_alerts_and_counts_the_rest():
    alerts = [{"alertname": f"a{n}", "summary": "", "url": ""} for n in range(5)]
    line = alert_text({"event": "alert_firing", "alerts": alerts})
    assert line is not None and plain(line) == "Firing: a0; a1; a2; and 2 more"
    counted = alert_text({"event": "alert_firing", "alerts": alerts, "alert_count": 40})
    assert counted is not None and plain(counted) == "Firing: a0; a1; a2; and 37 more"


def test_the_alert_words_cannot_make_slack_markup_and_the_link_stays_one_token():
    payload = {"event": "alert_new", "alertname": "x", "summary": "<!channel> a & b",
               "url": "https://prom.example.org/graph?q=a|b>c d"}
    said = alert_text(payload)
    assert said is not None
    assert drawn(said) == ("New alert in this group: x: &lt;!channel&gt; a &amp; b "
                           "<https://prom.example.org/graph?q=a%7Cb%3Ec%20d|graph>")


def test_an_unknown_note_says_nothing():
    assert alert_text({"event": "something_else"}) is None


@pytest.mark.parametrize(("given", "kept"), [
    ("http://admin:s3cret@prom.example.org:9090/graph?g0.expr=up",
     "http://prom.example.org:9090/graph?g0.expr=up"),
    ("https://token@prom.example.org/graph", "https://prom.example.org/graph"),
    ("http://a:b@c@[::1]:9090/graph", "http://[::1]:9090/graph"),
    (GRAPH, GRAPH),
    ("javascript:alert(1)", ""),
    ("ftp://prom.example.org/x", ""),
    ("http://[::1/graph", ""),
    ("", ""),
])
def test_a_generator_url_is_kept_without_credentials_and_only_over_http(given, kept):
    assert without_credentials(given) == kept
