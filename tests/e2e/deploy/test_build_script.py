"""The image's environment, built outside a container: ``deploy/build.sh`` (the one script the
Dockerfile's build stage runs) makes a scratch environment from uv.lock, which then holds exactly
the lock's packages, carries the runbooks and plan templates, answers ``opsgate --help``,
migrates a SQLite database and walks one case to CLOSED. No container daemon runs here, so the
Dockerfile itself is read: its build stage runs that script on the sources the wheel needs, its
final stage pins kubectl from Debian, runs as a non-root user and installs no compiler.

Bounded: uv's own cache (shared with ``make install``) makes the build a matter of links, about
10 s the first time on two cores; the walk is the demo's, a few seconds."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.deploy_doc import run_blocks
from tests.support.processes import clean_env

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
BUILD_TIMEOUT_S = 300
DOC_PREFIX = "/tmp/opsgate-image/opt/opsgate"


def run(argv: list[str], cwd: Path, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    # Only the system's PATH: nothing of the developer's .venv is found by name.
    env = clean_env(PATH="/usr/local/bin:/usr/bin:/bin")
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout_s, check=False)
    assert result.returncode == 0, f"{argv} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The environment deploy/build.sh makes, at a path like the image's /opt/opsgate: by
    docs/deploy.md's "1. The image" as written, from this checkout, into a scratch folder."""
    prefix = tmp_path_factory.mktemp("image") / "opt" / "opsgate"
    said = run_blocks("1. The image", ROOT, replaced=[(DOC_PREFIX, str(prefix))],
                      timeout_s=BUILD_TIMEOUT_S)
    assert f"opsgate environment ready in {prefix}" in said, said
    assert "usage: opsgate" in said, said
    return prefix


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_environment_holds_exactly_the_locks_packages(built):
    exported = run([str(BIN / "uv"), "export", "--project", str(ROOT), "--locked", "--no-dev",
                    "--no-hashes", "--no-emit-project", "--no-header", "--no-annotate",
                    "--format", "requirements-txt"], ROOT).stdout
    locked = {}
    for line in exported.splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)  # its marker for this Python, as uv read it
            if requirement.marker is None or requirement.marker.evaluate():
                locked[normalized(requirement.name)] = str(requirement.specifier).lstrip("=")
    listing = run([str(built / "bin" / "python"), "-c",
                   "import importlib.metadata as m, json; print(json.dumps("
                   "{d.metadata['Name']: d.version for d in m.distributions()}))"], built).stdout
    installed = {normalized(name): version for name, version in json.loads(listing).items()}
    assert installed.pop("opsgate") == tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert installed == locked
    assert "pytest" not in installed and "mypy" not in installed


def test_opsgate_is_installed_as_a_wheel_with_its_package_data(built, tmp_path):
    script = (built / "bin" / "opsgate").read_text().splitlines()[0]
    assert script == f"#!{built}/bin/python"
    where = run([str(built / "bin" / "python"), "-c",
                 "import core, json\n"
                 "from core.library.runbooks import runbooks_folder\n"
                 "from core.domain.plan_templates import template_names\n"
                 "print(json.dumps({'core': core.__file__,\n"
                 "  'runbooks': sorted(p.name for p in runbooks_folder('docs/runbooks')"
                 ".glob('*.md')),\n"
                 "  'folder': str(runbooks_folder('docs/runbooks')),\n"
                 "  'templates': template_names()}))"], tmp_path).stdout
    found = json.loads(where)
    assert Path(found["core"]).is_relative_to(built)
    assert Path(found["folder"]).is_relative_to(built)
    assert found["runbooks"] == sorted(p.name for p in (ROOT / "docs" / "runbooks").glob("*.md"))
    assert found["templates"] == sorted(
        p.stem for p in (ROOT / "core" / "domain" / "plan_templates").glob("*.json"))


def test_help_migrate_and_a_walk_of_one_case(built, tmp_path):
    opsgate = str(built / "bin" / "opsgate")
    listed = run([opsgate, "--help"], tmp_path).stdout
    for command in ("serve", "relay", "consume", "health", "migrate", "reconcile"):
        assert command in listed
    migrated = run([opsgate, "migrate", "--database-url", f"sqlite:///{tmp_path}/opsgate.db"],
                   tmp_path).stdout
    assert "upgraded from an empty schema to head" in migrated, migrated
    again = run([opsgate, "migrate", "--database-url", f"sqlite:///{tmp_path}/opsgate.db"],
                tmp_path).stdout
    assert "already at head" in again, again
    walk = run([opsgate, "demo", "--walk"], tmp_path).stdout
    assert re.search(r"^case \S+ CLOSED in ", walk, re.MULTILINE), walk


# -- the Dockerfile, read -------------------------------------------------------------------


def stages() -> list[list[str]]:
    """The Dockerfile's stages, each its instructions (continuations joined, comments out)."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    found: list[list[str]] = []
    for line in joined.splitlines():
        if line.startswith("FROM "):
            found.append([])
        if line.strip() and found:
            found[-1].append(line.strip())
    return found


def test_the_build_stage_runs_the_script_on_what_the_wheel_needs():
    build, final = stages()
    assert build[0].endswith(" AS build")
    assert "RUN UV=uv PYTHON=/usr/local/bin/python3.11 deploy/build.sh /src /opt/opsgate" in build
    uv_pin = re.search(r"UV_VERSION := (\S+)", (ROOT / "Makefile").read_text())
    assert uv_pin is not None
    assert f"ARG UV_VERSION={uv_pin.group(1)}" in build
    copied = {part for line in build if line.startswith("COPY ") for part in line.split()[1:-1]}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", "uv.lock", project["project"]["readme"], "deploy/build.sh",
              *wheel["packages"], *wheel["force-include"]}
    assert needed <= copied, needed - copied
    # The wheel's build backend is pinned too, so the build resolves nothing of its own.
    backend = {Requirement(r).name for r in project["build-system"]["requires"]}
    pinned = [Requirement(r) for r in project["tool"]["uv"]["build-constraint-dependencies"]]
    assert {r.name for r in pinned} == backend
    assert all(str(r.specifier).startswith("==") for r in pinned)
    assert final[0] == build[0].removesuffix(" AS build")


def test_the_final_stage_pins_kubectl_runs_as_nobody_and_has_no_compiler():
    _build, final = stages()
    text = "\n".join(final)
    pin = re.search(r"ARG KUBERNETES_CLIENT_VERSION=(\S+)", text)
    assert pin is not None
    assert '"kubernetes-client=${KUBERNETES_CLIENT_VERSION}"' in text
    assert "--no-install-recommends" in text
    assert re.search(r"^USER 10001$", text, re.MULTILINE)
    assert "COPY --from=build /opt/opsgate /opt/opsgate" in text
    for compiler in ("gcc", "g++", "build-essential", "clang", "make ", "uv ", "pip install"):
        assert compiler not in text, compiler
    assert "HEALTHCHECK" not in text  # each process its own: compose.yaml, deploy/kubernetes
