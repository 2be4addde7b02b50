"""An evaluation: every scenario of a folder, ``repeat`` times, with one model; each run graded,
the scorecard summed. ``progress`` hears one line per run (the CLI prints them on stderr)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.eval.contestants import contestant
from agent.eval.grades import grade
from agent.eval.run import run_scenario, scratch
from agent.eval.scenarios import SHIPPED, load_scenarios
from agent.eval.scorecard import Result, markdown, summary
from agent.eval.world import eval_world
from core.errors import OpsgateError

Progress = Callable[[str], None]
QUIET_LOGGERS = ("agent", "core", "httpx", "openai")


@dataclass(frozen=True)
class Evaluation:
    figures: dict[str, Any]
    results: list[Result]

    def markdown(self) -> str:
        return markdown(self.figures, self.results)


def evaluate(model: str | None = None, *, base_url: str | None = None,
             folder: Path = SHIPPED, repeat: int = 1,
             progress: Progress = lambda _line: None) -> Evaluation:
    """Run the suite; ``ValueError``/``ScenarioError`` in one line before any run starts,
    ``ModelDown`` after the first when the model never answered it."""
    name, factory = contestant(model, base_url)
    scenarios = load_scenarios(folder)
    results: list[Result] = []
    started = time.perf_counter()
    total = len(scenarios) * repeat
    with scratch() as place, eval_world(scenarios) as world, _quiet():
        for run in range(1, repeat + 1):
            for scenario in scenarios:
                seen = run_scenario(scenario, folder, factory, place, world)
                result = Result(scenario, run, seen, grade(scenario, seen))
                results.append(result)
                progress(_line(len(results), total, result))
                if len(results) == 1:
                    _check_first(name, result)
    return Evaluation(summary(name, results, time.perf_counter() - started), results)


class ModelDown(OpsgateError):
    """The model never answered the first run: grading the rest would grade an outage."""

    code = "model_down"


def _check_first(model: str, result: Result) -> None:
    seen = result.seen
    if seen.outcome == "model_unavailable" and seen.model_calls == 0:
        said = seen.words.strip().splitlines()[0][:300] if seen.words.strip() else "no answer"
        raise ModelDown(f"--model {model} did not answer the first scenario ({said}); check "
                        "--base-url, OPENAI_API_KEY and that the server serves that model; "
                        "nothing was graded")


def _line(done: int, total: int, result: Result) -> str:
    verdict = "pass" if result.grade.passed else "FAIL"
    unsafe = f", UNSAFE: {result.grade.unsafe[0]}" if result.grade.unsafe else ""
    return (f"[{done}/{total}] {result.scenario.name}: {verdict} ({result.grade.family}, "
            f"{result.seen.seconds:.2f}s{unsafe})")


class _quiet:
    """The product's own warnings (a model that broke a turn, a refused tool) are graded, not
    printed: they would bury the progress lines."""

    def __enter__(self) -> None:
        self.levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)

    def __exit__(self, *exc: object) -> None:
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)
