"""``http.request``: one call to an allow-listed URL that carries the step's Idempotency-Key
downstream, reads a bounded body, and succeeds on the statuses the plan expects (2xx by
default). Also the HTTP plumbing ``gateway.flip`` reuses."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, field_validator

from core.domain.plans import HEADER_VALUE_PATTERN
from core.outbound.allowlists import UrlAllowList, url_problem
from core.outbound.http import RedirectRefused, is_expected, send
from core.redact import url_without_credentials
from core.steps.adapters.base import (
    Checked,
    StepContext,
    StepOutcome,
    StepRefused,
    parse_params,
)
from core.steps.capture import truncate
from core.steps.words import Sentence, Value, json_words, refused, validated

BODY_LIMIT = 65536
_JSON_LIMIT = 262144
# Headers the adapter owns: the key is the step's, the rest belong to the HTTP framing.
_HEADERS_REFUSED = frozenset({
    "idempotency-key", "host", "content-length", "transfer-encoding", "connection", "te",
    "upgrade", "accept-encoding", "trailer", "expect",
})

HeaderName = Annotated[str, StringConstraints(pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")]
# Visible ASCII with inner spaces and tabs (RFC 9110 field-value): the guard checks the same.
HeaderValue = Annotated[str, StringConstraints(pattern=HEADER_VALUE_PATTERN)]
StatusCode = Annotated[int, Field(ge=100, le=599)]


class HttpParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
    url: str = Field(min_length=1, max_length=2048)
    body: JsonValue = Field(default=None, alias="json")
    headers: dict[HeaderName, HeaderValue] = Field(default_factory=dict, max_length=32)
    expect_status: list[StatusCode] | None = Field(default=None, min_length=1, max_length=20)

    @field_validator("headers")
    @classmethod
    def _own_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        refused = sorted(name for name in headers if name.lower() in _HEADERS_REFUSED)
        if refused:
            raise ValueError(f"these headers are set by opsgate, not a plan: {', '.join(refused)}")
        return headers

    @field_validator("body")
    @classmethod
    def _bounded_body(cls, body: JsonValue) -> JsonValue:
        if len(json.dumps(body)) > _JSON_LIMIT:
            raise ValueError(f"the JSON body is over {_JSON_LIMIT} bytes")
        return body


def describe(params: Mapping[str, Any]) -> Sentence:
    """The step in words: "POST https://flags.internal/api/flags/x {enabled: false}",
    with the statuses it expects and the names of the headers it sets (never their values)."""
    p = validated(HttpParams, params)
    if not isinstance(p, HttpParams):
        return refused("http.request", p)
    said: list[str | Value] = [Value(f"{p.method} {url_without_credentials(p.url)}")]
    if "body" in p.model_fields_set:
        said += [" ", Value(json_words(p.body))]
    if p.headers:
        said += [" with headers ", Value(", ".join(p.headers))]
    if p.expect_status:
        said += [", expecting ", " or ".join(map(str, p.expect_status))]
    return tuple(said)


def parse_url(text: str, action: str) -> httpx.URL:
    """``text`` as a plain absolute http(s) URL, or ``StepRefused`` saying why not."""
    shown = url_without_credentials(text)
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise StepRefused(f"{action}: {shown!r} is not a URL", action=action) from exc
    problem = url_problem(url)
    if problem:
        raise StepRefused(f"{action}: {shown!r} refused: {problem}", action=action, url=shown)
    return url


class HttpCall:
    """One outbound step call, its failures turned into outcomes: what http.request and
    gateway.flip share."""

    def __init__(self, label: str, allowed: Callable[[httpx.URL], bool], output_limit: int,
                 body_limit: int = BODY_LIMIT) -> None:
        self._label = label
        self._allowed = allowed
        self._output_limit = output_limit
        self._body_limit = body_limit

    def run(self, method: str, url: httpx.URL, ctx: StepContext, *, headers: Mapping[str, str],
            expect: Sequence[int] | None, **body: Any) -> StepOutcome:
        what = f"{self._label}: {method} {url_without_credentials(str(url))}"
        sent = {**headers, "Idempotency-Key": ctx.idempotency_key}
        try:
            reply = send(method, url, allowed=self._allowed, timeout_s=ctx.timeout_s,
                         body_limit=self._body_limit, headers=sent, **body)
        except RedirectRefused as exc:
            location = url_without_credentials(exc.location)
            return StepOutcome(False, f"{what}: {url_without_credentials(str(exc))}",
                               detail={"refused_redirect": location})
        except httpx.TimeoutException:
            return StepOutcome(False, f"{what}: timed out after {ctx.timeout_s:g}s",
                               detail={"timed_out": True})
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
            # UnicodeError: a header value that cannot be sent (the params check stops it first)
            return StepOutcome(False, f"{what}: {type(exc).__name__}: {exc}",
                               detail={"error": type(exc).__name__})
        ok = is_expected(reply.status, expect)
        return StepOutcome(
            ok=ok, summary=f"{what} → {reply.status}{'' if ok else ' (not expected)'}",
            output=truncate(reply.text(), self._output_limit),
            detail={"status": reply.status, "url": url_without_credentials(reply.url),
                    "duration_s": reply.duration_s,
                    "body_truncated": reply.truncated,
                    "idempotency_key": ctx.idempotency_key},
        )


class HttpRequestAdapter:
    action = "http.request"

    def __init__(self, allowlist: UrlAllowList, output_limit: int) -> None:
        self._allowlist = allowlist
        self._call = HttpCall(self.action, allowlist.allows, output_limit)

    def run(self, params: Mapping[str, Any], ctx: StepContext) -> StepOutcome:
        parsed, url = self._allowed(params)
        body = {"json": parsed.body} if "body" in parsed.model_fields_set else {}
        return self._call.run(parsed.method, url, ctx, headers=parsed.headers,
                              expect=parsed.expect_status, **body)

    def dry_run(self, params: Mapping[str, Any]) -> Checked:
        """The exact request line and body that would be sent, to an allowed URL."""
        parsed, url = self._allowed(params)
        line = f"would send {parsed.method} {url_without_credentials(str(url))}"
        if "body" in parsed.model_fields_set:
            body = json.dumps(parsed.body, sort_keys=True, ensure_ascii=False)
            line += f" with body {body[:300]}{'…' if len(body) > 300 else ''}"
        expect = ", ".join(map(str, parsed.expect_status or ())) or "2xx"
        return "ok", f"{line}, expecting {expect} (the URL is on the http allow-list)"

    def _allowed(self, params: Mapping[str, Any]) -> tuple[HttpParams, httpx.URL]:
        """The params and the URL, or ``StepRefused`` (invalid, or the URL not allowed)."""
        parsed = parse_params(HttpParams, params, self.action)
        url = parse_url(parsed.url, self.action)
        if not self._allowlist.allows(url):
            shown = url_without_credentials(parsed.url)
            raise StepRefused(f"{self.action}: {shown} is not on the http allow-list "
                              "(OPSGATE_HTTP_ALLOWLIST)", action=self.action, url=shown)
        return parsed, url
