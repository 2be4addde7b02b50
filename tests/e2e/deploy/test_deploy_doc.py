"""docs/deploy.md holds itself to what it says at the top: every ``sh`` block is run by a test
(the one its ``not run`` marker names, which runs its section through
``tests/support/deploy_doc.run_blocks``) or says what it needs that no test machine here has (a
container daemon, a cluster). The upgrade order is the one the upgrade test follows, the head it
names is alembic's, and no chart that does not exist is named."""

from __future__ import annotations

import re
from pathlib import Path

from core.migrate import head_revision
from tests.support.deploy_doc import DOC, ROOT, needs, sections

HERE = Path(__file__).resolve().parent
RUN_BY = {
    "1. The image": HERE / "test_build_script.py",
    "Health of each process": HERE.parent / "cli" / "test_loop_health.py",
    "3. Kubernetes": HERE / "test_kubernetes.py",
    "Backups": HERE / "test_backup_restore.py",
    "Upgrades": HERE / "test_upgrade.py",
}
MAY_NEED = {"it needs a container daemon", "it needs a cluster",
            "it needs a three-node NATS JetStream cluster"}


def test_every_block_is_run_by_a_test_or_says_what_it_needs():
    for heading, blocks in sections().items():
        for block in blocks:
            wanted = needs(block)
            if wanted is not None:
                assert wanted in MAY_NEED, f"{heading!r}: needs {wanted!r}?"
                continue
            assert heading in RUN_BY, f"no test runs the block under {heading!r}:\n{block.text}"
            assert block.run_by == str(RUN_BY[heading].relative_to(ROOT)), block.where
            assert f'run_blocks("{heading}"' in RUN_BY[heading].read_text(), heading


def test_every_named_test_still_has_its_section():
    assert set(RUN_BY) <= set(sections())


def test_the_upgrade_order_is_migrate_then_roll():
    text = DOC.read_text()
    upgrades = text[text.index("## Upgrades"):]
    assert upgrades.index("opsgate migrate") < upgrades.index("Roll `serve`, `relay` and `consume`")
    release = next(block for block in sections()["3. Kubernetes"] if "delete job" in block.text)
    lines = release.lines
    wait = next(n for n, line in enumerate(lines) if "job/opsgate-migrate" in line)
    everything = next(n for n, line in enumerate(lines)
                      if line.strip() == "kubectl apply -k deploy/kubernetes/overlays/production")
    assert wait < everything
    test = RUN_BY["Upgrades"].read_text()
    assert test.index('run_blocks("Upgrades"') < test.index("process.start()")


def test_no_chart_that_does_not_exist():
    assert "helm" not in DOC.read_text().lower()


def test_the_head_it_names_is_alembics():
    upgrades = DOC.read_text()[DOC.read_text().index("## Upgrades"):]
    named = re.findall(r"to head \((\d{4})\)", upgrades)
    assert named, "the Upgrades section no longer names the head"
    assert set(named) == {head_revision()[:4]}
