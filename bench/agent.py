"""Benchmark: model calls and tokens per case for the standard agent scenarios
(tests/scenarios/, run by bench/scenarios.py), with the scripted model and with the offline
planner model, on a scratch SQLite database. No network.

A change that makes the agent chattier shows up here: more model calls per case, or more tokens
in per call. The baseline, measured in the same run, is the prompt of a single call (system
prompt + tool specs + the request): ``tokens_in_ratio`` = tokens in per model call / baseline,
i.e. how much the thread's history adds on top of the fixed prompt. Tokens are the
deterministic 4-characters-a-token estimate both offline models report.
Figures last, as one line of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

# Run as ``python bench/agent.py``, this file's folder comes first on sys.path and its name
# would hide the ``agent`` package: put the repository there instead.
_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage  # noqa: E402

from agent.prompts import plan_request, system_prompt  # noqa: E402
from agent.tool_specs import tool_specs  # noqa: E402
from agent.usage import estimate_usage  # noqa: E402
from bench.scenarios import Outcome, load_scenarios, run_scenario  # noqa: E402
from bot.sandbox.demo import STAND_INS  # noqa: E402
from core.db.database import make_engine  # noqa: E402
from core.domain.views import CaseView  # noqa: E402
from core.migrate import upgrade_engine  # noqa: E402

NOW = "2026-01-01T00:00:00+00:00"


def baseline_prompt_tokens() -> int:
    """Tokens in of one model call with an empty thread: the fixed cost of every call."""
    case = CaseView(case_id="00000000-0000-0000-0000-000000000000", tenant="default",
                    title="p95 latency 4x on checkout right after deploy", severity="SEV2",
                    status="PLANNING", version=3, created_at=NOW, updated_at=NOW)
    prompt = [SystemMessage(system_prompt(str(case["case_id"]))),
              HumanMessage(plan_request(case))]
    return int(estimate_usage(prompt, AIMessage(content=""), tool_specs())["input_tokens"])


def run(kind: str, rounds: int) -> list[Outcome]:
    # The demo's stand-in restart-service first on PATH, as `opsgate demo` has it: the plans
    # that run it pass their dry run (bench.scenarios.agent_app allows it).
    os.environ["PATH"] = f"{STAND_INS}{os.pathsep}{os.environ.get('PATH', '')}"
    outcomes = []
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{folder}/bench.db")
        upgrade_engine(engine)
        for _ in range(rounds):
            for scenario in load_scenarios():
                outcomes.append(run_scenario(engine, scenario, kind))
        engine.dispose()
    return outcomes


def summary(outcomes: list[Outcome], baseline: int) -> dict[str, float]:
    calls = statistics.mean(o.model_calls for o in outcomes)
    tokens_in = statistics.mean(o.tokens_in for o in outcomes)
    tokens_out = statistics.mean(o.tokens_out for o in outcomes)
    per_call = sum(o.tokens_in for o in outcomes) / max(1, sum(o.model_calls for o in outcomes))
    return {"model_calls_per_case": round(calls, 2), "tokens_in_per_case": round(tokens_in),
            "tokens_out_per_case": round(tokens_out),
            "tokens_in_ratio": round(per_call / baseline, 2)}


SHORT: dict[str, Any] = {"rounds": 1}
"""``--short``: seconds and small sizes, what the bench test (tests/e2e/bench) runs."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--rounds", type=int, default=1, help="runs of every scenario (1..20)")
    parser.add_argument("--short", action="store_true",
                        help=f"seconds and small sizes: {SHORT}")
    args = parser.parse_args(argv)
    if args.short:
        vars(args).update(SHORT)
    rounds = max(1, min(20, args.rounds))
    baseline = baseline_prompt_tokens()
    scripted, offline = run("scripted", rounds), run("offline", rounds)
    print(f"{'scenario':<24}{'model':<10}{'status':<11}{'calls':>6}{'tok in':>9}{'tok out':>9}")
    for o in scripted[:len(load_scenarios())] + offline[:len(load_scenarios())]:
        print(f"{o.scenario:<24}{o.model:<10}{o.status:<11}{o.model_calls:>6}{o.tokens_in:>9}"
              f"{o.tokens_out:>9}")
    figures = {"scenarios": len(load_scenarios()), "rounds": rounds,
               "baseline_prompt_tokens": baseline,
               "scripted": summary(scripted, baseline), "offline": summary(offline, baseline),
               "per_scenario": {o.scenario: {"model_calls": o.model_calls,
                                             "tokens_in": o.tokens_in,
                                             "tokens_out": o.tokens_out}
                                for o in scripted[:len(load_scenarios())]}}
    print(json.dumps(figures, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
