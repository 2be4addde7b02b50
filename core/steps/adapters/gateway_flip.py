"""``gateway.flip``: move a route's traffic to another backend by POSTing to the configured
traffic-gateway admin URL, with the step's Idempotency-Key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from core.outbound.allowlists import Origin
from core.redact import url_without_credentials
from core.settings_errors import InvalidSettings
from core.steps.adapters.base import StepContext, StepOutcome, StepRefused, parse_params
from core.steps.adapters.http import HttpCall, parse_url
from core.steps.words import Sentence, Value, refused, validated

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")]


class FlipParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    route: Name
    to: Name
    from_: Name | None = Field(default=None, alias="from")  # lets the gateway check the old side
    weight: int | None = Field(default=None, ge=0, le=100)


def describe(params: Mapping[str, Any]) -> Sentence:
    """The step in words: "Move route checkout's traffic from primary to standby" (or "Send
    30% of route checkout's traffic to standby")."""
    p = validated(FlipParams, params)
    if not isinstance(p, FlipParams):
        return refused("gateway.flip", p)
    origin: tuple[str | Value, ...] = (" from ", Value(p.from_)) if p.from_ else ()
    if p.weight is not None:
        return (f"Send {p.weight}% of route ", Value(p.route), "'s traffic", *origin, " to ",
                Value(p.to), " at the traffic gateway")
    return ("Move route ", Value(p.route), "'s traffic", *origin, " to ", Value(p.to),
            " at the traffic gateway")


def _admin_url(text: str) -> httpx.URL:
    try:
        return parse_url(text, "gateway.flip")
    except StepRefused as exc:  # a configuration error: fail at start, not per step
        shown = url_without_credentials(text)
        raise InvalidSettings([f"OPSGATE_TRAFFIC_GATEWAY_URL={shown}: {exc.message}; expected "
                               "a plain http:// or https:// URL (no credentials)"]) from None


class GatewayFlipAdapter:
    action = "gateway.flip"

    def __init__(self, admin_url: str | None, output_limit: int) -> None:
        self._admin_url = _admin_url(admin_url) if admin_url else None
        self._output_limit = output_limit

    def run(self, params: Mapping[str, Any], ctx: StepContext) -> StepOutcome:
        parsed = parse_params(FlipParams, params, self.action)
        if self._admin_url is None:
            raise StepRefused(f"{self.action}: the traffic gateway is not configured "
                              "(OPSGATE_TRAFFIC_GATEWAY_URL)", action=self.action)
        call = HttpCall(self.action, self._same_origin, self._output_limit)
        body = parsed.model_dump(by_alias=True, exclude_none=True)
        return call.run("POST", self._admin_url, ctx, headers={}, expect=None, json=body)

    def _same_origin(self, url: httpx.URL) -> bool:
        return self._admin_url is not None and Origin.of(url) == Origin.of(self._admin_url)
