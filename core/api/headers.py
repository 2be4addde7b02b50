"""What the REST API reads from request headers, checked: the bearer token (``core.api.deps``
says whose it is), the Idempotency-Key of a write, ``If-Match`` (the case version a write
expects) and ``X-Correlation-Id``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header
from fastapi.security import HTTPBearer

from core.errors import BadRequest

KEY_MAX_LENGTH = 200
CORRELATION_ID_MAX_LENGTH = 128

bearer = HTTPBearer(
    auto_error=False,
    description="A principal's token (`opsgate token create`) or OPSGATE_API_TOKEN. Once the "
    "server has any token, every write needs one (operator or approver), and so does every read "
    "(reader or above) unless OPSGATE_API_READS=open. Approvals and rejections need an approver "
    "linked to a person. With no token configured at all, reads and writes are open and nobody "
    "can approve over REST.",
)

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(alias="Idempotency-Key", description="Required on every write: 1..200 printable "
           "characters. A repeat returns the first reply byte for byte."),
]
IfMatchHeader = Annotated[
    str | None,
    Header(alias="If-Match", description='The case version the write expects, e.g. "3".'),
]
CorrelationIdHeader = Annotated[
    str | None,
    Header(alias="X-Correlation-Id", description="Becomes the correlation id of the write."),
]


def check_idempotency_key(key: str | None) -> str:
    if key is None:
        raise BadRequest("every write needs an Idempotency-Key header", header="Idempotency-Key")
    if not 1 <= len(key) <= KEY_MAX_LENGTH or not key.isprintable():
        raise BadRequest(f"Idempotency-Key must be 1..{KEY_MAX_LENGTH} printable characters",
                         header="Idempotency-Key")
    return key


def correlation_id(header: str | None) -> str | None:
    if header is None:
        return None
    if not 1 <= len(header) <= CORRELATION_ID_MAX_LENGTH or not header.isprintable():
        raise BadRequest(
            f"X-Correlation-Id must be 1..{CORRELATION_ID_MAX_LENGTH} printable characters",
            header="X-Correlation-Id")
    return header


def parse_if_match(header: str | None) -> int | None:
    """The version an ``If-Match`` names: ``"3"`` (or ``W/"3"``, ``3``); ``*`` names none."""
    if header is None or header.strip() == "*":
        return None
    tag = header.strip().removeprefix("W/")
    if len(tag) >= 2 and tag[0] == tag[-1] == '"':
        tag = tag[1:-1]
    if not (tag.isascii() and tag.isdigit() and len(tag) <= 9):
        raise BadRequest('If-Match must name one case version, e.g. If-Match: "3"',
                         header="If-Match", value=header[:64])
    return int(tag)


def expected_version(if_match: str | None, in_body: int | None) -> int | None:
    """The version a write expects, from ``If-Match`` or the body; the two must agree."""
    in_header = parse_if_match(if_match)
    if in_header is not None and in_body is not None and in_header != in_body:
        raise BadRequest("If-Match and expected_version name different versions",
                         if_match=in_header, expected_version=in_body)
    return in_header if in_header is not None else in_body

