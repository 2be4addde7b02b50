"""The doc runner: the shell blocks of a Markdown page (```` ```sh ````, ```` ```bash ````,
```` ```console ````), run as a reader runs them and checked against what the page shows.

How a page is read:

- Every shell block runs, in the page's order, in ONE bash (so an ``export``, a variable or a
  server started with ``&`` carries on to the blocks below), from a scratch clone of the
  checkout (``scratch_clone``: ``.venv`` and the sources as they are here, ``docs/`` a copy) with
  no ``OPSGATE_*`` variable of the caller's and no ``.venv/bin`` on PATH, as a new user's shell
  after ``make install``. Whatever the page started in the background is stopped at the end.
- A block the page does not want run says so right above it, visibly in the source:
  ``<!-- not run: why -->`` (``make demo`` serves until Ctrl-C, a cluster, a cloud's CLI). A
  reason that names a test (``tests/…py``) means that test runs the block its own way. Every
  other block runs: one that fails fails the test; nothing is skipped quietly.
- ``sh``/``bash``: a command is a run of lines with no blank line and no comment line between
  them; each must exit 0. A ``# NNN …`` comment right under a ``curl`` command is its answer: the
  status, ``, header: value`` pairs, then the body's fragments in order, ``…`` standing for what
  varies (continued by comment lines indented two spaces or more). A ```` ```text ```` block
  right under a shell block is what the block prints on stdout, line for line, ``…`` standing
  for anything and any number for any other number.
- ``console``: ``$ command`` (continued after a trailing backslash), the lines under it what it
  prints, stdout and stderr together, ``…`` standing for anything; its exit status is free
  (the page shows ``echo $?`` where it matters, and ``$?`` is left as the command left it).

A test may replace a few of the page's example values by its own (a free port for 8080, a
database of its own for a host that does not exist); each replaced value must still be on the
page."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

from tests.support.processes import clean_env

ROOT = Path(__file__).resolve().parents[2]
SHELLS = ("sh", "bash", "console")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->", re.DOTALL)
ANSWER = re.compile(r"# (?P<status>[1-5]\d\d)(?P<headers>(?:, [A-Za-z-]+: (?:\"[^\"]*\"|\S+))*)"
                    r"(?: (?P<body>.*))?$")
HEADER = re.compile(r", ([A-Za-z-]+): (\"[^\"]*\"|\S+)")
HEREDOC = re.compile(r"<<-?\s*['\"]?(?P<end>\w+)['\"]?")
TEST_NAMED = re.compile(r"tests/\S+?\.py")
CONTINUED = re.compile(r"#\s{2,}(?P<more>\S.*)$")
NUMBER = re.compile(r"\d+(?:\.\d+)?")
LEFT_OUT = {".git", ".cache", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis",
            ".import_linter_cache", "docs"}
"""What a scratch clone does not link: git's own folder, caches, and docs (copied: pages write
beside their examples)."""


@dataclass
class Block:
    """One shell block of a page: its language, the page line of its first line, its lines,
    why it is not run (None: it runs) and the ``text`` block right under it, if any."""

    page: str
    lang: str
    line: int
    lines: list[str]
    not_run: str | None = None
    prints: list[str] | None = None
    heading: str = ""

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def run_by(self) -> str | None:
        """The test that runs this block its own way, when its marker names one."""
        found = TEST_NAMED.search(self.not_run or "")
        return found[0] if found else None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str


@dataclass
class Step:
    """One command of a block as written, and what the page shows it prints or answers."""

    block: Block
    line: int
    command: list[str]
    shown: list[str] | None = None  # console: the lines under the command
    answer: Answer | None = None  # sh: the ``# NNN …`` comment under a curl
    must_succeed: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.block.page}:{self.line}"


def page_blocks(page: str) -> list[Block]:
    """The shell blocks of ``page`` (a path under the checkout), as CommonMark reads it."""
    tokens = MarkdownIt("commonmark").parse((ROOT / page).read_text(encoding="utf-8"))
    found: list[Block] = []
    heading = ""
    for n, token in enumerate(tokens):
        if token.type == "heading_open":
            heading = tokens[n + 1].content
        if token.type != "fence" or token.map is None:
            continue
        lang = token.info.split()[0] if token.info.strip() else ""
        if lang == "text" and found and found[-1].prints is None and _right_after(tokens, n):
            found[-1].prints = token.content.splitlines()
        if lang not in SHELLS:
            assert lang not in {"shell", "zsh", "shell-session"}, \
                f"{page}:{token.map[0] + 1}: write ```sh or ```console, which the doc test runs"
            continue
        before = tokens[n - 1] if n else None
        marker = NOT_RUN.fullmatch(before.content.strip()) \
            if before is not None and before.type == "html_block" else None
        found.append(Block(page, lang, token.map[0] + 2, token.content.splitlines(),
                           marker["reason"] if marker else None, heading=heading))
    return found


def _right_after(tokens: list, n: int) -> bool:  # type: ignore[type-arg]
    previous = tokens[n - 1] if n else None
    return previous is not None and previous.type == "fence" and \
        previous.info.split()[:1] in (["sh"], ["bash"])


def steps(block: Block) -> list[Step]:
    if block.lang == "console":
        return _console_steps(block)
    return _sh_steps(block)


def _console_steps(block: Block) -> list[Step]:
    found: list[Step] = []
    step: Step | None = None
    continued = False
    for offset, line in enumerate(block.lines):
        if continued and step is not None:
            step.command.append(line)
        elif line.startswith("$ "):
            step = Step(block, block.line + offset, [line[2:]], shown=[], must_succeed=False)
            found.append(step)
        else:
            assert step is not None and step.shown is not None, \
                f"{block.page}:{block.line + offset}: output before any `$ ` command"
            step.shown.append(line)
        continued = line.endswith("\\")
    for step in found:
        while step.shown and not step.shown[-1].strip():
            step.shown.pop()
    return found


def _sh_steps(block: Block) -> list[Step]:
    found: list[Step] = []
    step: Step | None = None
    ended = answering = False
    until: str | None = None  # a here-document's end: its lines are the command's, blank or not
    for offset, line in enumerate(block.lines):
        text = line.strip()
        if until is not None and step is not None:
            step.command.append(line)
            until = None if text == until else until
            continue
        if text and not text.startswith("#"):
            opened = HEREDOC.search(line)
            until = opened["end"] if opened else None
            if step is None or ended:
                step, ended = Step(block, block.line + offset, []), False
                found.append(step)
            step.command.append(line)
            continue
        if text and step is not None and not ended and (got := ANSWER.match(text)) \
                and any(re.search(r"\bcurl\b", part) for part in step.command):
            step.answer = Answer(int(got["status"]), {
                name.lower(): value for name, value in HEADER.findall(got["headers"] or "")},
                got["body"] or "")
            answering = True
        elif text and answering and step is not None and step.answer is not None \
                and (more := CONTINUED.match(text)):
            step.answer.body += more["more"]
        else:
            answering = False
        ended = True
    return found


# -- running a page -------------------------------------------------------------------------


def scratch_clone(folder: Path) -> Path:
    """A checkout as a fresh clone has it after ``make install``: every top-level entry linked
    to this one's (``.venv`` included), ``docs/`` copied, no database or cache of a run."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name in LEFT_OUT or entry.name.startswith("opsgate.db"):
            continue
        (folder / entry.name).symlink_to(entry)
    shutil.copytree(ROOT / "docs", folder / "docs")
    return folder


def reader_path() -> str:
    """PATH without this interpreter's folder: a reader's shell has no bare ``opsgate``."""
    venv_bin = Path(sys.executable).parent
    return os.pathsep.join(part for part in os.environ.get("PATH", "").split(os.pathsep)
                           if part and Path(part) != venv_bin)


def script(all_steps: Sequence[Step], out: Path) -> str:
    """The steps as one bash script: each step's stdout to ``<n>.out`` (a console step's stderr
    too), its stderr to ``<n>.err``, its status to ``<n>.rc`` and the headers of its last curl
    to ``<n>.headers``; ``$?`` left as the step left it."""
    parts = [f'curl() {{ command curl -D "{out}/headers" "$@"; }}', f': > "{out}/headers"']
    for n, step in enumerate(all_steps):
        body = "\n".join(step.command)
        errors = "2>&1" if step.block.lang == "console" else f'2> "{out}/{n}.err"'
        parts.append(f'{{\n{body}\n}} > "{out}/{n}.out" {errors}\n'
                     f'__rc=$?; echo $__rc > "{out}/{n}.rc"; cp "{out}/headers" '
                     f'"{out}/{n}.headers"; : > "{out}/headers"; (exit $__rc)')
    return "\n".join(parts) + "\n"


def replace(text: str, replaced: Sequence[tuple[str, str]], page: str) -> str:
    for example, own in replaced:
        assert example in text, f"{page} no longer says {example!r}"
        text = text.replace(example, own)
    return text


@dataclass(frozen=True)
class Ran:
    """What each step of a page did."""

    steps: list[Step]
    out: Path
    stderr: str

    def output(self, n: int) -> str:
        path = self.out / f"{n}.out"
        return path.read_text(errors="replace") if path.exists() else "(did not run)\n"

    def status(self, n: int) -> int | None:
        path = self.out / f"{n}.rc"
        return int(path.read_text()) if path.exists() else None

    def problems(self) -> list[str]:
        """Every difference between what the page shows and what its commands did."""
        found: list[str] = []
        by_block: dict[int, list[int]] = {}
        for n, step in enumerate(self.steps):
            by_block.setdefault(id(step.block), []).append(n)
            problem = self._problem(n, step)
            if problem is not None:
                found.append(f"{step.where}: {step.command[0].strip()}\n    {problem}")
        for numbers in by_block.values():
            block = self.steps[numbers[0]].block
            if block.prints is None:
                continue
            printed = "".join(self.output(n) for n in numbers)
            if not same_lines(block.prints, printed.splitlines(), numbers_aside=True):
                found.append(f"{block.where}: the text block under it shows\n"
                             + "\n".join(block.prints) + f"\n    it printed\n{printed}")
        return found

    def _problem(self, n: int, step: Step) -> str | None:
        status, output = self.status(n), self.output(n)
        if status is None:
            return "did not run"
        if step.must_succeed and status != 0:
            err = (self.out / f"{n}.err").read_text(errors="replace") \
                if (self.out / f"{n}.err").exists() else ""
            return f"exited {status}:\n{output}{err}"
        if step.shown is not None and not same_lines(step.shown, output.splitlines()):
            return "the page shows\n" + "\n".join(step.shown) + f"\n    it printed\n{output}"
        if step.answer is not None:
            return answer_problem(step.answer, self.out / f"{n}.headers", output)
        return None


def run_page(page: str, clone: Path, replaced: Sequence[tuple[str, str]] = (),
             timeout_s: float = 400, **env: str) -> Ran:
    """Every shell block of ``page`` not marked ``not run``, in order, in one bash in ``clone``;
    whatever it left running is stopped."""
    all_steps = [step for block in page_blocks(page) if block.not_run is None
                 for step in steps(block)]
    out = clone / ".doc-run"
    out.mkdir()
    (clone / ".doc-run.sh").write_text(replace(script(all_steps, out), replaced, page))
    runner = subprocess.Popen(["bash", str(clone / ".doc-run.sh")], cwd=clone,
                              env=clean_env(PATH=reader_path(), **env), start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = runner.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stderr = f"(the page did not finish in {timeout_s:.0f} s)"
    finally:
        stop_group(runner.pid)
        runner.wait()
    return Ran(all_steps, out, stderr or "")


def stop_group(pgid: int) -> None:
    """SIGTERM to what the page started (servers with ``&``), SIGKILL to what outlives it."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sent)
        except ProcessLookupError:
            return
        try:
            subprocess.run(["sh", "-c", f"while kill -0 -{pgid} 2>/dev/null; do sleep 0.1; done"],
                           timeout=10, check=False)
            return
        except subprocess.TimeoutExpired:
            continue


# -- comparing ------------------------------------------------------------------------------


def same_lines(shown: Sequence[str], got: Sequence[str], numbers_aside: bool = False) -> bool:
    """Whether ``got`` is ``shown`` line for line, ``…`` standing for anything (and, with
    ``numbers_aside``, any number for any other)."""
    if len(shown) != len(got):
        return False
    return all(re.fullmatch(_pattern(want.rstrip(), numbers_aside), have.rstrip())
               for want, have in zip(shown, got, strict=True))


def _pattern(line: str, numbers_aside: bool) -> str:
    parts = []
    for part in line.split("…"):
        if numbers_aside:
            pieces = NUMBER.split(part)
            parts.append(r"\d+(?:\.\d+)?".join(re.escape(piece) for piece in pieces))
        else:
            parts.append(re.escape(part))
    return ".*".join(parts)


def answer_problem(answer: Answer, headers_file: Path, output: str) -> str | None:
    """What differs between a curl's documented answer and the one it got, if anything."""
    lines = headers_file.read_text(errors="replace").splitlines() if headers_file.exists() else []
    status_lines = [n for n, line in enumerate(lines) if re.match(r"HTTP/\S+ \d{3}", line)]
    last = status_lines[-1] if status_lines else None
    status = int(lines[last].split()[1]) if last is not None else None
    got = {name.strip().lower(): value.strip() for name, _, value in
           (line.partition(":") for line in lines[(last or 0) + 1:] if ":" in line)}
    problems = []
    if status != answer.status:
        problems.append(f"status {status}, the page says {answer.status}")
    problems += [f"{name}: {got.get(name)}, the page says {value}"
                 for name, value in answer.headers.items() if got.get(name) != value]
    missing = missing_fragment(answer.body, output)
    if missing is not None:
        problems.append(f"no {missing!r} where the page shows it")
    if not problems:
        return None
    return "; ".join(problems) + f"\n    got: {output.strip()[:600]}"


def missing_fragment(pattern: str, output: str) -> str | None:
    """The first of the pattern's ``…``-separated fragments not found, in order, in ``output``
    (whitespace ignored on both sides: the page wraps long answers)."""
    squeezed = re.sub(r"\s+", "", output)
    at = 0
    for fragment in (re.sub(r"\s+", "", part) for part in pattern.split("…")):
        found = squeezed.find(fragment, at)
        if found < 0:
            return fragment
        at = found + len(fragment)
    return None
