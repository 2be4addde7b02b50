"""A scenario folder stays a folder (issue 24, finding 6): names that become file names are plain
names, a link out of the folder is refused, each with one line naming the scenario file and the
field; and the harness writes only into its scratch folder, whatever a scenario says."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent.eval.run import Scratch, run_scenario
from agent.eval.scenarios import SHIPPED, Scenario, ScenarioError, load_scenario, load_scenarios
from agent.eval.series import write_recorded
from agent.eval.world import eval_world
from core.cli import main

BASE = "deploy-regression-checkout"


def files_under(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.is_file() or path.is_symlink()}


def scenario_folder(root: Path, **changes: Any) -> Path:
    """``root/a/b/scenarios`` holding the shipped ``BASE`` scenario with ``changes``, and a file
    ``root/a/b/x.md`` beside the folder (what ``../../x`` names from its runbooks)."""
    folder = root / "a" / "b" / "scenarios"
    (folder / "runbooks").mkdir(parents=True)
    (root / "a" / "b" / "x.md").write_text("# x\nnot a runbook of this folder\n")
    raw = {**json.loads((SHIPPED / f"{BASE}.json").read_text()), **changes}
    (folder / f"{BASE}.json").write_text(json.dumps(raw))
    return folder


def refused_by_the_command(folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["eval", "--scenarios", str(folder)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_runbook_named_with_dot_dots_is_refused_naming_the_file_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = scenario_folder(tmp_path, runbooks=["../../x"])
    before = files_under(tmp_path)

    err = refused_by_the_command(folder, capsys)

    assert f"{folder / BASE}.json: runbooks.0:" in err
    assert "'../../x' is not a plain name" in err
    assert files_under(tmp_path) == before  # nothing read into, nor written, anywhere


@pytest.mark.parametrize("name", ["/etc/passwd", "sub/book", "..", "a..b", "..\\x", "", "x\n"])
def test_every_name_that_is_not_plain_is_refused(tmp_path: Path, name: str) -> None:
    folder = scenario_folder(tmp_path, runbooks=[name])
    with pytest.raises(ScenarioError, match=r"runbooks\.0: .*not a plain name"):
        load_scenario(folder / f"{BASE}.json")


def test_a_metric_named_with_dot_dots_is_refused(tmp_path: Path) -> None:
    raw = json.loads((SHIPPED / f"{BASE}.json").read_text())
    series = {"../../evil": next(iter(raw["series"].values()))}
    folder = scenario_folder(tmp_path, series=series)
    with pytest.raises(ScenarioError, match=r"json: series\.\.\./\.\./evil.*not a plain name"):
        load_scenarios(folder)


def test_a_runbook_that_links_out_of_the_folder_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = scenario_folder(tmp_path, runbooks=["innocent"])
    secret = tmp_path / "outside" / "secret.md"
    secret.parent.mkdir()
    secret.write_text("# secret\n")
    os.symlink(secret, folder / "runbooks" / "innocent.md")
    before = files_under(tmp_path)

    err = refused_by_the_command(folder, capsys)

    assert f"{folder / BASE}.json: runbooks.0:" in err and "leads out of" in err
    assert files_under(tmp_path) == before


def test_a_link_inside_the_folder_is_followed(tmp_path: Path) -> None:
    folder = scenario_folder(tmp_path, runbooks=["alias"])
    (folder / "runbooks" / "real.md").write_text("# real\n")
    os.symlink(folder / "runbooks" / "real.md", folder / "runbooks" / "alias.md")
    assert [s.runbooks for s in load_scenarios(folder)] == [("alias",)]


def test_a_scenario_file_that_links_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text((SHIPPED / f"{BASE}.json").read_text())
    os.symlink(elsewhere, folder / f"{BASE}.json")
    with pytest.raises(ScenarioError, match="leads out of"):
        load_scenarios(folder)


def test_the_harness_writes_only_into_its_scratch_folder(tmp_path: Path) -> None:
    """A scenario that got past the checks (built here without them) still cannot make a run
    write outside its folder: every write is resolved and checked first."""
    shipped = load_scenario(SHIPPED / f"{BASE}.json")
    evil = Scenario.model_construct(**{**dict(shipped), "runbooks": ("../../x",)})
    scratch_root = tmp_path / "scratch"
    scratch_root.mkdir()
    folder = scenario_folder(tmp_path / "source")
    place = Scratch(scratch_root)
    before = files_under(tmp_path)

    with eval_world([shipped]) as world, pytest.raises(ScenarioError, match="not a plain name"):
        run_scenario(evil, folder, lambda _s, _c: None, place,  # type: ignore[arg-type,return-value]
                     world)

    assert files_under(tmp_path) == before  # the run's folder is gone, nothing else changed
    assert not (scratch_root / "x.md").exists()


def test_recorded_series_stay_in_their_folder(tmp_path: Path) -> None:
    shipped = load_scenario(SHIPPED / f"{BASE}.json")
    shape = next(iter(shipped.series.values()))
    with pytest.raises(ScenarioError, match="leads out of"):
        write_recorded(tmp_path / "run" / "series", BASE, {"../../evil": shape})
    assert not (tmp_path / "evil.json").exists()
