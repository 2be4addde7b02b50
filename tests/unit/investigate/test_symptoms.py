"""Which components show symptoms for a report that names none (``core.investigate.symptoms``):
ranked by firing alerts and how far their metrics moved, each read with its own labels; a
component that shows nothing is no candidate, and a reader that fails hides nothing else."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.catalog.files import load_catalog
from core.errors import Unavailable
from core.investigate.scope import Target
from core.investigate.symptoms import by_symptoms, candidates_said

OPENED = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
SERIES = {"bookings": (0.002, 0.08), "search-api": (200.0, 210.0), "payments-api": (0.01, 0.03)}


def catalog(tmp_path: Path, names: tuple[str, ...] = tuple(SERIES)) -> Any:
    docs = [f"apiVersion: backstage.io/v1alpha1\nkind: Component\nmetadata:\n  name: {name}\n"
            f"  annotations:\n    opsgate.dev/metric-labels: service={name}\n"
            "spec:\n  type: service\n  lifecycle: production\n  owner: group:default/oncall\n"
            for name in names]
    owner = ("apiVersion: backstage.io/v1alpha1\nkind: Group\nmetadata:\n  name: oncall\n"
             "spec:\n  type: team\n  children: []\n")
    (tmp_path / "catalog-info.yaml").write_text("---\n".join([owner, *docs]))
    return load_catalog(tmp_path)


def service(target: Target) -> str:
    return dict(target.metric_labels)["service"]


class Metrics:
    def __init__(self, broken: str | None = None) -> None:
        self.asked: list[tuple[str, str]] = []
        self.broken = broken

    def list_metrics(self, target: Target, **_: Any) -> dict[str, Any]:
        if service(target) == self.broken:
            raise Unavailable("Prometheus answered 503")
        return {"selector": f'{{service="{service(target)}"}}', "metrics": ["m"]}

    def query(self, target: Target, promql: str, **_: Any) -> dict[str, Any]:
        self.asked.append((service(target), promql))
        first, last = SERIES[service(target)]
        return {"series": [{"first": first, "last": last}]}


class Alerts:
    def alerts(self, target: Target) -> dict[str, Any]:
        firing = {"payments-api": [{"alertname": "PaymentsSlow", "state": "active"},
                                   {"alertname": "Old", "state": "suppressed"}]}
        return {"alerts": firing.get(service(target), [])}

    def silences(self, target: Target) -> dict[str, Any]:
        return {"silences": []}


def test_components_rank_by_alerts_and_moves_each_read_with_its_own_labels(tmp_path: Path):
    metrics = Metrics()
    found = by_symptoms(catalog(tmp_path), metrics, Alerts(), OPENED, OPENED)  # type: ignore[arg-type]
    assert [c.name for c in found] == ["bookings", "payments-api"]  # search-api barely moved
    assert found[0].moved == (("m", 0.002, 0.08),) and found[1].alerts == ("PaymentsSlow",)
    assert all(promql == f'm{{service="{name}"}}' for name, promql in metrics.asked)
    said = candidates_said(found)
    assert said == ("The report names no service; by what is firing and which metrics moved, "
                    "the candidates are bookings (m 0.002 → 0.08), payments-api (alert "
                    "PaymentsSlow firing; m 0.01 → 0.03). I investigate bookings, the most "
                    "anomalous.")


def test_nothing_firing_or_moved_is_no_candidate_and_a_failing_reader_hides_no_other(
        tmp_path: Path):
    quiet = by_symptoms(catalog(tmp_path, ("search-api",)), Metrics(), None, OPENED, OPENED)  # type: ignore[arg-type]
    assert quiet == [] and "there is no candidate" in candidates_said(quiet)
    broken = by_symptoms(catalog(tmp_path), Metrics(broken="bookings"), Alerts(), OPENED,  # type: ignore[arg-type]
                         OPENED)
    assert [c.name for c in broken] == ["payments-api"]
    assert by_symptoms(catalog(tmp_path), None, None, OPENED, OPENED) == []
