"""The recorded changes on SQLite and PostgreSQL: each change once by its id (a retry finds the
first, concurrent deliveries record one, other content under a known id is refused), read newest
first by component or service within a window, the last one before a moment; and the intake's
resolution of a service to the catalog's component."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from core.catalog.files import load_catalog
from core.catalog.model import Catalog, Component
from core.changes import (
    Change,
    ChangeIdReused,
    ChangeIntake,
    ChangeStore,
    Recorded,
    component_of,
)
from core.changes.formats import fingerprint
from core.db.tables import change_record
from tests.support.api import rows

CATALOG = Path(__file__).parents[3] / "docs" / "examples" / "catalog"
T0 = datetime(2026, 11, 27, 14, 0, tzinfo=UTC)


def change(change_id: str = "ci-1", *, minutes: float = 0, component: str | None = "payments-api",
           service: str = "payments-api", summary: str = "v2.4 to prod") -> Change:
    made = Change(change_id, "generic", "deploy", service, component, "payments", "v2.4",
                  summary, "ci", None, T0 + timedelta(minutes=minutes), T0 + timedelta(hours=1),
                  "")
    return replace(made, fingerprint=fingerprint(made, (service,)))


@pytest.fixture
def store(engine: Engine) -> ChangeStore:
    return ChangeStore(engine)


def test_a_change_is_recorded_once_and_a_retry_finds_the_first(store, engine):
    first, created = store.add(change())
    assert created and first == change()
    later = replace(change(), received_at=T0 + timedelta(hours=2), component=None)
    again, created = store.add(later)  # the same content, received later, resolved otherwise
    assert not created
    assert again == first and again.received_at == T0 + timedelta(hours=1)
    assert rows(engine, change_record) == 1


def test_other_content_under_a_known_id_is_refused_and_the_first_stands(store, engine):
    store.add(change())
    with pytest.raises(ChangeIdReused, match="recorded before with other content") as refused:
        store.add(change(summary="something else"))
    assert refused.value.details == {"change_id": "ci-1"}
    assert store.last_before(["payments-api"], [], T0).summary == "v2.4 to prod"
    assert rows(engine, change_record) == 1


def test_concurrent_deliveries_of_one_change_record_it_once(store, engine):
    outcomes: list[bool] = []
    start = threading.Barrier(6)

    def deliver() -> None:
        start.wait()
        outcomes.append(store.add(change())[1])

    threads = [threading.Thread(target=deliver) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == [False] * 5 + [True]
    assert rows(engine, change_record) == 1


def test_recent_changes_are_newest_first_by_component_or_service_within_the_window(store):
    store.add(change("a", minutes=-120))  # before the window
    store.add(change("b", minutes=-60))
    store.add(change("c", minutes=-30, component=None))  # found by its service only
    store.add(change("d", minutes=-10, component="search-api", service="search-api"))
    store.add(change("e", minutes=0))
    store.add(change("f", minutes=5))  # after the window
    since, until = T0 - timedelta(minutes=60), T0
    assert [c.change_id for c in store.recent(["payments-api"], ["payments-api"], since,
                                              until)] == ["e", "c", "b"]
    assert [c.change_id for c in store.recent(["payments-api"], [], since, until)] == ["e", "b"]
    assert [c.change_id for c in store.recent([], ["search-api"], since, until)] == ["d"]
    assert [c.change_id for c in store.recent(["payments-api", "search-api"], [], since,
                                              until, limit=2)] == ["e", "d"]
    assert store.recent([], [], T0 - timedelta(days=1), T0 + timedelta(days=1)) == []


def test_times_are_instants_whatever_zone_they_are_given_in(store):
    plus_two = timezone(timedelta(hours=2))
    store.add(replace(change(), happened_at=datetime(2026, 11, 27, 16, 0, tzinfo=plus_two)))
    stored = store.recent(["payments-api"], [], T0, T0)[0]
    assert stored.happened_at == T0 and stored.happened_at.utcoffset() == timedelta(0)
    assert store.recent(["payments-api"], [], datetime(2026, 11, 27, 15, 1, tzinfo=plus_two),
                        datetime(2026, 11, 27, 16, 1, tzinfo=plus_two)) == [stored]
    assert store.recent(["payments-api"], [], T0 + timedelta(seconds=1), T0 + timedelta(1)) \
        == []


def test_the_last_change_before_a_moment(store):
    assert store.last_before(["payments-api"], ["payments-api"], T0) is None
    store.add(change("before", minutes=-20))
    store.add(change("at", minutes=0, component=None))
    store.add(change("after", minutes=1))
    assert store.last_before(["payments-api"], ["payments-api"], T0).change_id == "at"
    assert store.last_before(["payments-api"], [], T0).change_id == "before"
    assert store.last_before(["payments-api"], [], T0 - timedelta(minutes=21)) is None
    assert store.last_before([], [], T0 + timedelta(days=1)) is None


def test_the_intake_resolves_the_service_in_the_catalog_or_keeps_it_unresolved(engine):
    catalog = load_catalog(CATALOG)
    assert component_of(catalog, ["payments-api"], None) == "payments-api"
    assert component_of(catalog, ["payments-api"], "payments") == "payments-api"
    assert component_of(catalog, ["payments-api"], "staging") is None  # not where it lives
    assert component_of(catalog, ["search-api"], "search") == "search-api"
    assert component_of(catalog, ["production", "payments-api"], None) == "payments-api"
    assert component_of(catalog, ["billing"], None) is None
    checkout = Component("checkout", "shop-team", "production", None, None, "checkout-web",
                         "shop", (("app", "checkout"),), (), "test")
    by_kubernetes = Catalog.of([checkout], [], [])
    assert component_of(by_kubernetes, ["checkout-web"], "shop") == "checkout"
    assert component_of(by_kubernetes, ["checkout"], None) == "checkout"
    assert component_of(by_kubernetes, ["checkout-web"], "staging") is None
    intake = ChangeIntake(ChangeStore(engine), lambda: catalog, clock=lambda: T0)
    body = (b'{"id": "x-1", "service": "billing", "kind": "config", "version": "42", '
            b'"summary": "raised the pool", "actor": "ops", "at": "2026-11-27T13:00:00Z"}')
    unknown = intake.receive(body)
    assert isinstance(unknown, Recorded)
    assert unknown.created and unknown.change.component is None
    assert unknown.change.received_at == T0
    with engine.connect() as conn:
        stored = conn.execute(select(change_record.c.service, change_record.c.component)).one()
    assert tuple(stored) == ("billing", None)
    assert ChangeStore(engine).recent([], ["billing"], T0 - timedelta(hours=2), T0) \
        == [unknown.change]
