"""Prometheus collectors of the agent, declared once: model calls, tokens, tool calls and runs.

Per-case figures are on the case's timeline (``agent_usage`` notes); metrics carry no case label
so their cardinality stays bounded."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

MODEL_CALLS = Counter("agent_model_calls_total", "Chat model calls the agent made.",
                      ["model", "outcome"])
MODEL_TOKENS = Counter("agent_model_tokens_total", "Tokens the agent's model calls used.",
                       ["model", "direction"])
MODEL_SECONDS = Histogram("agent_model_call_seconds", "Duration of one chat model call.",
                          ["model"])
TOOL_CALLS = Counter("agent_tool_calls_total", "Tool calls the model asked for, by answer.",
                     ["tool", "status"])
RUNS = Counter("agent_runs_total", "Agent runs (one turn on one case), by outcome.",
               ["trigger", "outcome"])
