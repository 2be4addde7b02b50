"""The one error hierarchy of opsgate: every error we raise derives from ``OpsgateError`` and
carries a stable ``code``; the REST API alone maps them to HTTP statuses (``core/api/statuses``).

    OpsgateError
    ├── BadRequest                missing Idempotency-Key, malformed input
    │   └── TooDeep               (core.strict_json) JSON nested too deep; also a ValueError
    ├── Unauthorized              missing, unknown or revoked bearer token
    ├── Forbidden                 a known caller whose role does not allow this (REST API)
    ├── NotFound                  unknown case, unknown plan
    ├── IllegalTransition         the FSM has no such move from the current status
    ├── PreconditionFailed
    │   ├── VersionConflict       expected_version / If-Match does not match
    │   └── StaleFence            a fence token lower than the highest issued for the session
    ├── PayloadTooLarge           a request body over the API's size limit
    ├── Unprocessable
    │   ├── GuardFailed           the FSM allows the move but a guard refused it
    │   │   ├── ApprovalRefused   the approver may not decide this plan (policy)
    │   │   └── StalePlan         the approval names a plan the case no longer waits on
    │   ├── KeyReuse              an idempotency key sent again with a different request
    │   │   └── ChangeIdReused    (core.changes.model) a change id sent again with other content
    │   ├── OutOfScope            (core.investigate.scope) a look outside the case's scope
    │   │   └── LookRefused       (core.investigate.looks) a look at a source not configured
    │   ├── InvalidPlan           a ChangePlan that fails its JSON Schema
    │   ├── InvalidRequest        a request body or parameter of the wrong shape (REST API)
    │   │   └── InvalidChange     (core.changes.model) a POSTed change that cannot be recorded
    │   ├── StepRefused           (core.steps.adapters) a step's params fail validation
    │   └── OffPlan               (core.api.walkthrough.execute) a step other than the plan's next
    ├── Unavailable               a dependency (database, Redis) is unreachable: safe to retry
    │   ├── MetricsUnavailable    (core.investigate.metrics) Prometheus did not answer a look
    │   ├── AlertsUnavailable     (core.investigate.alerts) Alertmanager did not answer a look
    │   └── KubernetesUnavailable (core.investigate.kubernetes) the Kubernetes API did not answer
    ├── RemoteUnavailable         (core.mcp.remote) an external MCP server did not answer
    ├── BusinessRefusal           (core.gateway) a tool's deterministic "no", stored and replayed
    ├── Held                      (core.messaging.consumer) a message that cannot take effect yet
    │   │                         (and retrying now cannot help): handed out again later
    │   └── ChatNotConfigured     (core.chat) no chat (Slack) to post in: the post is held
    ├── DirectSideEffectCall      (core.gateway) a side effect called around the gateway
    ├── InvalidSettings           (core.settings_errors) a setting that cannot be used
    ├── CatalogError              (core.catalog.problems) a service catalog that cannot be used
    ├── PolicyError               (core.policy.rules) approval policies that cannot decide
    ├── NonFiniteNumber           (core.strict_json) NaN or ±Infinity in JSON; also a ValueError
    ├── CliError                  (core.cli.command) an expected command failure, told as it is
    ├── DemoFailed                (core.demo) the demo did not get the promised reply
    ├── PortTaken                 (bot.sandbox.serving) the port to serve on is in use
    ├── SlackError                (bot.sandbox.workspace) the sandbox Slack's ``ok: false``
    └── InternalError             a fault behind the scenes: logged, never shown to a caller
        ├── ToolCallFailed        (core.gateway) a gateway call that did not succeed
        ├── EvidenceMissing       (core.evidence.sources) a source could not produce a value
        ├── RedirectRefused       (core.outbound.http) a redirect we may not follow
        ├── WorkersDied           (core.messaging.supervisor) every worker thread died
        ├── ModelUnavailable      (agent.graph) the model could not answer
        └── LostLock              (agent.replies) the run's session lock or fence is not the latest

Third-party exceptions are translated at the boundary (``raise Unavailable(...) from exc``).
"""

from __future__ import annotations

from typing import Any


class OpsgateError(Exception):
    """Base of every error opsgate raises on purpose."""

    code: str = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            _BY_CODE.setdefault(cls.code, cls)

    def to_body(self) -> dict[str, Any]:
        """The error as the REST API and the idempotency store render it."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return {"error": error}


# Every error class by its code, filled as the classes are defined (see ``error_from_body``).
_BY_CODE: dict[str, type[OpsgateError]] = {OpsgateError.code: OpsgateError}


class BadRequest(OpsgateError):
    code = "bad_request"


class Unauthorized(OpsgateError):
    code = "unauthorized"


class Forbidden(OpsgateError):
    code = "forbidden"


class NotFound(OpsgateError):
    code = "not_found"


class IllegalTransition(OpsgateError):
    code = "illegal_transition"


class PreconditionFailed(OpsgateError):
    code = "precondition_failed"


class VersionConflict(PreconditionFailed):
    code = "version_conflict"


class StaleFence(PreconditionFailed):
    code = "stale_fence"


class Unprocessable(OpsgateError):
    code = "unprocessable"


class GuardFailed(Unprocessable):
    code = "guard_failed"


class ApprovalRefused(GuardFailed):
    code = "approval_refused"


class StalePlan(GuardFailed):
    code = "stale_plan"


class KeyReuse(Unprocessable):
    code = "idempotency_key_reused"


class InvalidPlan(Unprocessable):
    code = "invalid_plan"


class InvalidRequest(Unprocessable):
    code = "invalid_request"


class PayloadTooLarge(OpsgateError):
    code = "payload_too_large"


class Unavailable(OpsgateError):
    code = "unavailable"


class InternalError(OpsgateError):
    """A fault behind the scenes (a failed call, a source without data): the log has it all;
    a caller hears only that something went wrong, as with any unexpected exception."""

    code = "internal_error"


def error_from_body(body: dict[str, Any]) -> OpsgateError:
    """Rebuild the error a stored or received ``{"error": {...}}`` body describes; a code no
    class claims keeps its code on an ``OpsgateError``."""
    error = body.get("error", {})
    code = str(error.get("code"))
    cls = _BY_CODE.get(code, OpsgateError)
    rebuilt = cls.__new__(cls)
    OpsgateError.__init__(rebuilt, str(error.get("message", "")),
                          **dict(error.get("details") or {}))
    if cls.code != code:
        rebuilt.code = code
    return rebuilt
