"""Property: whatever events arrive, in whatever order, the committed status is the fold of the
accepted events in the timeline, and the version counts them."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.api.statuses import reply_status
from core.domain.fsm import CaseEvent, CaseStatus, allowed_events, fold
from tests.support.cases import command, key, open_case


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), length=st.integers(min_value=0, max_value=25))
def test_status_is_the_fold_of_accepted_timeline_events(service, data, length):
    case_id = open_case(service)
    status = CaseStatus.NEW
    for _ in range(length):
        # Mostly legal moves so histories get deep; the rest anything at all.
        legal = allowed_events(status)
        pool = legal if legal and data.draw(st.integers(0, 9)) < 7 else tuple(CaseEvent)
        event = data.draw(st.sampled_from(pool))
        satisfies_guard = data.draw(st.integers(0, 9)) < 8
        broken = {} if satisfies_guard else {"plan": {"title": "half a plan"}, "plan_hash": "no"}
        reply = service.transition(command(case_id, event, **broken), key())
        assert reply_status(reply) in (200, 409, 422), reply.body
        status = CaseStatus(service.get_case(case_id)["status"])
    case = service.get_case(case_id)
    timeline = service.timeline(case_id)
    accepted = [row for row in timeline if row["meta"]["outcome"] == "accepted"]
    assert CaseStatus(case["status"]) is fold([CaseEvent(row["event"]) for row in accepted])
    assert case["version"] == len(accepted)
    assert [row["meta"]["version"] for row in accepted] == list(range(1, len(accepted) + 1))
