"""The remedy (``core.domain.remedy``): the inverse of the cause on the object that changed, or
a ``noop`` asking a person in one sentence — never an undo of something else."""

from __future__ import annotations

from core.domain.plans import parse_plan
from core.domain.remedy import Workload, annotations_of, cause_of, remedy

LEDGER = Workload("ledger", "ledger", 3, ("ledger-config",))


def test_the_cause_is_read_from_what_the_change_changed():
    assert cause_of("rollback", {"kind": "deploy", "target": "deployment/ledger"}) == "deploy"
    assert cause_of("rollback", {"kind": "deploy"}) == "deploy"
    assert cause_of("rollback", {"kind": "config", "target": "configmap/c"}) == "config"
    assert cause_of("rollback", {"kind": "config"}) == "config"
    assert cause_of("rollback", {"kind": "config", "target": "flag/new-payout"}) == "flag"
    assert [cause_of(a, None) for a in ("scale", "failover", "restart", "no change")] == [
        "saturation", "regional", "stuck", "none"]


def test_a_deploy_and_a_restart_are_made_by_their_templates():
    assert remedy("deploy", {"kind": "deploy"}, LEDGER, {}).template == "k8s.rollout.canary"
    assert remedy("stuck", None, LEDGER, {}).template == "script.restart"


def test_without_before_a_person_is_asked_in_a_sentence():
    made = remedy("config", {"kind": "config", "target": "configmap/ledger-config"}, LEDGER, {})
    assert made.plan is not None and parse_plan(made.plan).noop_only
    assert made.plan["title"] == ("No automatic revert: no data of ConfigMap "
                                  "ledger/ledger-config before the change was recorded; a "
                                  "person must set it back")
    assert "restore ConfigMap ledger/ledger-config" in made.plan["steps"][0]["params"]["note"]


def test_a_flag_without_a_feature_flag_resource_or_value_asks_a_person():
    flag = {"kind": "config", "target": "flag/new-payout", "before": "off", "service": "ledger"}
    unnamed = remedy("flag", flag, LEDGER, {})
    assert unnamed.plan is not None and "opsgate.dev/flags" in unnamed.plan["title"]
    named = remedy("flag", flag, LEDGER, {"flags": "ledger-flags"})
    assert named.plan is not None
    assert named.plan["steps"][0]["params"]["value"] == {"defaultVariant": "off"}
    unknown = remedy("flag", {**flag, "before": None}, LEDGER, {"flags": "ledger-flags"})
    assert unknown.plan is not None and parse_plan(unknown.plan).noop_only


def test_scale_never_goes_past_its_maximum():
    at_most = remedy("saturation", None, Workload("ledger", "ledger", 5), {"max-replicas": "5"})
    assert at_most.plan is not None and parse_plan(at_most.plan).noop_only
    assert "already runs 5 replicas" in at_most.plan["title"]
    doubled = remedy("saturation", None, LEDGER, {})
    assert doubled.plan is not None and doubled.plan["steps"][0]["params"]["replicas"] == 6
    assert doubled.plan["rollback"]["steps"][0]["params"]["replicas"] == 3


def test_failover_needs_two_regions_from_the_catalog():
    alone = remedy("regional", None, LEDGER, {"regions": "fra1"})
    assert alone.plan is not None and parse_plan(alone.plan).noop_only
    both = remedy("regional", None, LEDGER, {"regions": "fra1, ams3", "route": "ledger-api"})
    assert both.plan is not None and both.plan["steps"][0]["params"] == {
        "route": "ledger-api", "from": "fra1", "to": "ams3"}
    assert both.plan["rollback"]["steps"][0]["params"]["to"] == "fra1"


def test_annotations_are_read_from_the_components_entry():
    found = [{"name": "other", "remedy": {"opsgate.dev/regions": "x,y"}},
             {"name": "ledger", "remedy": {"opsgate.dev/max-replicas": "9"}}]
    assert annotations_of(found, "ledger") == {"max-replicas": "9"}
    assert annotations_of([], None) == {}
