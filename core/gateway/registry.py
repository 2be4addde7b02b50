"""Declaring a side effect once: ``@side_effect`` names the tool, how its business key is
derived and whether it is idempotent. The function can then only run through
``Gateway.invoke``; calling it directly raises ``DirectSideEffectCall``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from core.gateway.model import DirectSideEffectCall, ToolBody

BusinessKey = Callable[[Mapping[str, Any]], str]


class SideEffect:
    """A declared side-effecting tool. Not callable: hand it to ``Gateway.invoke``."""

    def __init__(self, tool: str, body: ToolBody, business_key: BusinessKey | None,
                 idempotent: bool) -> None:
        self.tool = tool
        self.idempotent = idempotent
        self._executor = body
        self._business_key = business_key
        self.__doc__ = body.__doc__
        self.__name__ = getattr(body, "__name__", tool)

    def business_key(self, args: Mapping[str, Any]) -> str | None:
        return None if self._business_key is None else self._business_key(args)

    def body(self) -> ToolBody:
        """The undecorated function, for the gateway only."""
        return self._executor

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise DirectSideEffectCall(
            f"{self.tool} is a side effect: call it through gateway.invoke(...), never directly",
            tool=self.tool,
        )

    def __repr__(self) -> str:
        return f"<side effect {self.tool}>"


def side_effect(tool: str, *, business_key: BusinessKey | None = None,
                idempotent: bool = False) -> Callable[[ToolBody], SideEffect]:
    """Declare ``tool``: ``business_key(args)`` identifies one business intent (default: the
    canonical args); ``idempotent=True`` lets an expired claim be run again."""

    def declare(body: ToolBody) -> SideEffect:
        return SideEffect(tool, body, business_key, idempotent)

    return declare
