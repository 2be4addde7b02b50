"""The catalog of template ChangePlans that ``POST /plan/generate`` proposes until a planner exists.

Each template is a JSON file in ``plan_templates/`` beside this module, named ``<template>.json``
and valid against the ChangePlan schema; callers get a fresh copy they may change freely.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from core.errors import NotFound

_SUFFIX = ".json"


def _folder() -> Traversable:
    return resources.files("core.domain").joinpath("plan_templates")


@cache
def _catalog() -> dict[str, str]:
    """Template name → the file's text, read once per process."""
    return {
        entry.name.removesuffix(_SUFFIX): entry.read_text("utf-8")
        for entry in _folder().iterdir()
        if entry.name.endswith(_SUFFIX)
    }


def template_names() -> tuple[str, ...]:
    """Every template the catalog offers, sorted."""
    return tuple(sorted(_catalog()))


def load_template(name: str) -> dict[str, Any]:
    """The ChangePlan of template ``name``; ``NotFound`` listing the known ones otherwise."""
    text = _catalog().get(name)
    if text is None:
        known = list(template_names())
        raise NotFound(f"no plan template {name!r}; known: {', '.join(known)}",
                       template=name, known=known)
    plan: dict[str, Any] = json.loads(text)
    return plan
