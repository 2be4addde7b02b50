"""What a person's words ask of the next plan (pure): the words of a ``/case resume``, of a mention
in a PARKED case's thread, or the reason of a Reject — "restart instead", "don't roll back",
"scale to 10", "leave it alone". Every planner reads them the same way: the template planner and
the offline planner act on them where the evidence allows, and the model is given them.

Only a person's words are read here (never the incident's, an alert's or a log's): they are the
words of someone the chat or the API authenticated, steering a plan that still goes to the gate."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from core.domain.attempts import REJECTED, Replan

Remedy = Literal["rollback", "restart", "scale", "failover", "no change"]
REMEDIES: tuple[tuple[Remedy, re.Pattern[str]], ...] = (
    ("rollback", re.compile(r"\b(?:roll(?:ing)?(?: \w+)?[ -]?back|rollbacks?|revert(?:ing)?|"
                            r"undo(?:ing)?)\b")),
    ("restart", re.compile(r"\b(?:restart(?:ing)?|bounce|recycle|reboot)\b")),
    ("scale", re.compile(r"\b(?:scal(?:e|ing)(?: (?:it |them )?(?:out|up))?|more replicas|"
                         r"add (?:capacity|replicas|pods))\b")),
    ("failover", re.compile(r"\b(?:fail(?:ing)?[ -]?over|switch (?:the )?regions?|"
                            r"(?:flip|move|shift) (?:the )?traffic)\b")),
    ("no change", re.compile(r"\b(?:do nothing|change nothing|no change|leave it(?: alone| be)?|"
                             r"wait and see)\b")),
)
NEGATION = re.compile(r"\b(?:don'?t|do not|never|not|no|stop|avoid|without|instead of)\s+"
                      r"(?:\w+\s+){0,2}$")
REPLICAS = re.compile(r"\bscale\b[^.;,]*?\bto\s+(\d{1,4})\b|\b(\d{1,4})\s+replicas\b")
SAID = {"rollback": "roll back", "restart": "restart", "scale": "scale out",
        "failover": "fail over", "no change": "change nothing"}


@dataclass(frozen=True)
class Steer:
    """What the words ask: the remedy they want (None: none named), the remedies they rule out,
    the replica count they name for a scale, and the words themselves."""

    want: Remedy | None = None
    avoid: frozenset[Remedy] = frozenset()
    replicas: int | None = None
    words: str = ""

    @property
    def empty(self) -> bool:
        return self.want is None and not self.avoid

    def said(self) -> str:
        """What they asked, in words: "restart (not roll back)"."""
        parts = [SAID[self.want]] if self.want else []
        if self.replicas is not None and self.want == "scale":
            parts = [f"scale to {self.replicas} replicas"]
        parts += [f"not {SAID[r]}" for r in sorted(self.avoid)]
        return ", ".join(parts)


def steer_of(*texts: str | None) -> Steer:
    """What the first of ``texts`` that asks anything asks (the resume's words before the
    rejection's reason: the later word wins)."""
    for text in texts:
        found = _steer(text or "")
        if not found.empty:
            return found
    return Steer()


def _steer(text: str) -> Steer:
    lowered = " ".join(text.lower().replace("\u2019", "'").split())
    wanted: list[tuple[int, Remedy]] = []
    avoid: set[Remedy] = set()
    for remedy, pattern in REMEDIES:
        for match in pattern.finditer(lowered):
            if NEGATION.search(lowered[:match.start()][-40:]):
                avoid.add(remedy)
            else:
                wanted.append((match.start(), remedy))
    # "restart instead" after "don't roll back": the remedy wanted is the one named, not ruled out
    want = next((remedy for _, remedy in sorted(wanted) if remedy not in avoid), None)
    replicas = None
    found = REPLICAS.search(lowered)
    if found:
        replicas = int(found.group(1) or found.group(2))
        want = want or "scale"
    return Steer(want, frozenset(avoid), replicas, text.strip())


TEMPLATES: dict[Remedy, str] = {
    "rollback": "k8s.rollout.canary", "restart": "script.restart",
    "failover": "gateway.flip.failover", "no change": "noop"}
"""The catalog template that carries out each remedy (a scale has none: it is written)."""


def replan_steer(replan: Replan | None) -> Steer:
    """What the person asked on the replan: their resume's words, else their Reject's reason."""
    if replan is None:
        return Steer()
    rejected = replan.parked_because if replan.parked_by == REJECTED else ""
    return steer_of(replan.resumed.words, rejected)


def asking_title(replan: Replan) -> str:
    """The title of the plan that changes nothing and asks the person what to try, when what
    they asked (or the plan the words pick) was declined on the case."""
    why = (f"the plan was rejected (\"{replan.parked_because[:120]}\")"
           if replan.parked_by == REJECTED and replan.parked_because
           else "the plan was declined on this case")
    return (f"No change: {why}; a person decides what to try "
            "(/case resume <id> <what to try>)")[:200]
