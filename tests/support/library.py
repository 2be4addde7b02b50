"""Past cases for the librarian's tests: closed by hand with their findings, plan and
verification reading; and ``library_file``, a migrated SQLite file of three verified cases
embedded by the embedded model (the tests of ``opsgate library`` and its docs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from core.analysis.store import write_findings
from core.db.database import make_engine, transaction
from core.domain.commands import NoteCase
from core.domain.fsm import CaseEvent
from core.domain.plans import plan_hash
from core.library import Document, Library
from core.library.embeddings import EmbeddedModel
from core.migrate import upgrade_engine
from tests.support.cases import command, key, open_case

E = CaseEvent

# title, plan title, finding (or None), verification
PAST: list[tuple[str, str, str | None, str]] = [
    ("checkout p95 latency over 2 s after deploy of v2.3",
     "Roll back checkout to v2.2 with a canary", "latency_p95_ms stepped up 240% at the deploy",
     "latency_p95_ms = 130 over 300s, below 500"),
    ("payments API returning 502 errors from the card processor",
     "Fail payments over to the standby card processor", "http_5xx_ratio error ratio 9%",
     "http_5xx_ratio = 0.002, below 0.01"),
    ("orders service pods OOMKilled, memory climbing for hours",
     "Restart the orders pods and pin the cache size", "memory_working_set_bytes rising "
     "steadily", "memory stable for 30 min"),
    ("eu-west region unreachable, fail over traffic to us-east",
     "Flip the traffic gateway to us-east", None, "standby_saturation = 0.4, below 0.8"),
    ("postgres primary disk full, writes failing with ENOSPC",
     "Compress WAL archives and grow the data volume", None, "disk usage 61%"),
    ("search results empty after index rebuild", "Re-run the search index build", None,
     "probe search returns hits"),
    ("login page slow for mobile users", "Scale the auth frontends", None, "latency ok"),
    ("checkout 5xx errors on the cart endpoint", "Restart the cart service", None,
     "http_5xx_ratio below 0.01"),
    ("TLS certificate expired on api gateway", "Renew and deploy the certificate", None,
     "probe https ok"),
    ("kafka consumer lag growing on billing events", "Add billing consumers", None,
     "lag under 1000"),
    ("DNS resolution failures inside the cluster", "Restart coredns", None, "probe ok"),
    ("redis cache hit ratio dropped after config change", "Revert the redis maxmemory change",
     None, "hit ratio back to 95%"),
    ("CPU saturation on the recommendation service", "Scale recommendations out", None,
     "cpu below 70%"),
    ("cron job for invoices stuck since midnight", "Kill and restart the invoice job", None,
     "job finished"),
    ("image upload failing, S3 permission denied", "Restore the upload bucket policy", None,
     "probe upload ok"),
    ("latency spike on the inventory API during the sale", "Raise the inventory cache TTL",
     None, "latency_p95_ms below 500"),
    ("email notifications delayed by several hours", "Drain the mail queue", None,
     "queue empty"),
    ("websocket disconnects for chat users", "Increase the load balancer idle timeout", None,
     "disconnects normal"),
    ("feature flag service returning stale values", "Flush the flag cache", None,
     "flags fresh"),
    ("mobile app crash after the 5.1 release", "Turn off the new onboarding flag", None,
     "crash rate normal"),
]


def plan_titled(title: str) -> dict[str, Any]:
    return {"title": title, "risk_score": 0.2,
            "steps": [{"action": "noop", "params": {}, "timeout_s": 30, "retry": 0}],
            "rollback": {"action": "noop"}, "verify": {"metric": "error_rate", "below": 0.01}}


def closed_case(app, title: str, plan_title: str, finding: str | None,
                verification: str, *, series_read: bool = True) -> UUID:
    """A case run to CLOSED by hand: findings, the plan, its verification reading (read from
    the component's series unless ``series_read`` is False: a reading from before they were
    recorded)."""
    cases = app.cases
    case_id = open_case(cases, title)
    plan = plan_titled(plan_title)
    for event, extra in ((E.START_ANALYSIS, {}), (E.ANALYSIS_DONE, {}),
                         (E.PLAN_READY, {"plan": plan}),
                         (E.GATE_APPROVED, {"plan_hash": plan_hash(plan)}), (E.EXEC_DONE, {})):
        assert cases.transition(command(case_id, event, **extra), key()).ok
    if finding is not None:
        with transaction(app.engine) as conn:
            write_findings(conn, case_id, 2, [{"metric": finding.split()[0],
                                               "summary": finding}])
    cases.note(NoteCase(case_id, "verify_result", "verifier", reason=verification,
                        meta={"state": "held", "passed": True,
                              **({"series_read": True} if series_read else {})}),
               key()).data()
    assert cases.transition(command(case_id, E.VERIFY_PASS), key()).ok
    return case_id


TITLES = ("payment gateway timeouts, card charges failing", "disk full on the search cluster",
          "kube-dns name resolution failures")


def library_file(folder: Path) -> str:
    """The URL of ``folder``/opsgate.db holding the three cases of ``TITLES``."""
    path = folder / "opsgate.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade_engine(engine)
    library = Library(engine, EmbeddedModel())
    for n, title in enumerate(TITLES):
        library.index(Document(f"case:{n}", "case", title, [f"{title}\nverified: held"], {}))
    engine.dispose()
    return f"sqlite:///{path}"
