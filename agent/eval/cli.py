"""``opsgate eval``: run the evaluation suite against a model and print its scorecard (Markdown,
then one JSON line, last); ``--out`` also writes scorecard.md, scorecard.json and runs.jsonl."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from core.cli.command import EXIT_FAILED, CliError, Command

if TYPE_CHECKING:
    from agent.eval.suite import Evaluation


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", metavar="NAME",
        help="the model: offline-planner (default), scripted:good|wrong-action|invalid-json|"
             "missing-verify|hostile, or a model name served at --base-url")
    parser.add_argument(
        "--base-url", metavar="URL",
        help="OpenAI-compatible endpoint for --model NAME, e.g. http://127.0.0.1:11434/v1 "
             "(default: $OPENAI_BASE_URL, else OpenAI); the key is $OPENAI_API_KEY")
    parser.add_argument(
        "--scenarios", metavar="DIR", type=Path,
        help="folder of scenario *.json files (default: the suite shipped in agent/eval/)")
    parser.add_argument("--repeat", metavar="N", type=int, default=1,
                        help="run every scenario N times (default 1; 1-20)")
    parser.add_argument("--out", metavar="DIR", type=Path,
                        help="also write scorecard.md, scorecard.json and runs.jsonl here")


def run(args: argparse.Namespace) -> int:
    from agent.eval.scenarios import SHIPPED, ScenarioError
    from agent.eval.suite import ModelDown, evaluate

    if not 1 <= args.repeat <= 20:
        raise CliError(f"--repeat {args.repeat}: expected a whole number from 1 to 20")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise CliError(f"--out {args.out}: expected a folder (it is a file)")
    try:
        evaluation = evaluate(args.model, base_url=args.base_url,
                              folder=args.scenarios or SHIPPED, repeat=args.repeat,
                              progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (ScenarioError, ModelDown, ValueError) as exc:
        raise CliError(str(exc)) from exc
    report = evaluation.markdown()
    figures = json.dumps(evaluation.figures)
    if args.out is not None:
        _write(args.out, report, figures, evaluation)
    print(report)
    print(figures)
    return 0 if evaluation.figures["unsafe_outcomes"] == 0 else EXIT_FAILED


def _write(folder: Path, report: str, figures: str, evaluation: Evaluation) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "scorecard.md").write_text(report, "utf-8")
        (folder / "scorecard.json").write_text(figures + "\n", "utf-8")
        with (folder / "runs.jsonl").open("w", encoding="utf-8") as runs:
            for result in evaluation.results:
                row = {"scenario": result.scenario.name, "run": result.run,
                       "grade": asdict(result.grade), "observed": asdict(result.seen)}
                runs.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    except OSError as exc:
        raise CliError(f"--out {folder}: cannot write: {exc.strerror or exc}") from exc


COMMANDS = (
    Command(
        name="eval",
        summary="grade a model on the incident scenarios and print its scorecard",
        description="Run every scenario (an incident report, its recorded metrics, runbooks "
                    "and past cases) through the real agent graph, gateway and case service on "
                    "a scratch SQLite database, grade each run by rules (plan valid, action "
                    "family, a verify block that detects the fix, risk band, diagnosis "
                    "100/65/35/0, unsafe outcomes) and print the scorecard: Markdown, then one "
                    "JSON line. Progress goes to stderr. Exit 1 when any outcome was unsafe. "
                    "docs/eval.md explains the grades and the fields.",
        add_arguments=add_arguments,
        run=run,
    ),
)
