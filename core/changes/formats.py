"""Reads one POSTed body into a change: opsgate's generic JSON, Argo CD's notification webhook
(the template of docs/operations.md) or GitHub's ``deployment_status`` event. A body that is no
change to record (a status other than success, a sync that did not succeed, a ping) is
``NotRecorded``; a body that cannot be read is one ``InvalidChange`` naming every problem.

What these bodies say is data: text is made storable and cut (``core.alerts.text``), links lose
their credentials, and nothing in them is ever followed. Pure: no I/O."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, cast, overload

from core.alerts.model import without_credentials
from core.alerts.text import cut, shortened, storable
from core.changes.model import (
    KINDS,
    SOURCES,
    Change,
    InvalidChange,
    Kind,
    Source,
)
from core.strict_json import loads

ID_MAX = 200
NAME_MAX = 253  # a Kubernetes object's name
VERSION_MAX = 200
SUMMARY_MAX = 500
ACTOR_MAX = 200
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
VALUE_MAX = 8192  # characters of a before or after value as compact JSON
KUBERNETES_NAME = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"  # a DNS-1123 subdomain
KEY = r"[A-Za-z0-9]([-A-Za-z0-9._:]{0,251}[A-Za-z0-9])?"  # a flag's key, a route's name
TARGET_PATTERN = (f"^(deployment|configmap|hpa)/{KUBERNETES_NAME}$"
                  f"|^(flag|route)/{KEY}$")
TARGET = re.compile(TARGET_PATTERN)
TARGET_FORM = ("deployment/NAME, configmap/NAME, flag/KEY, hpa/NAME or route/NAME (NAME a "
               "Kubernetes name: lower-case letters, digits, '-' and '.'; KEY letters, digits, "
               "'-', '_', '.' and ':')")
ABSENT = "<no value>"  # what a Go template (Argo CD's) renders for a field the app lacks
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
WHAT: dict[Source, str] = {"generic": "this change", "argocd": "this Argo CD notification",
                           "github": "this GitHub deployment_status event"}


@dataclass(frozen=True)
class Received:
    """A change read from a body, not yet resolved in the catalog (``component`` None), and the
    names the catalog may know its service by, in the order they are tried."""

    change: Change
    names: tuple[str, ...]


@dataclass(frozen=True)
class NotRecorded:
    """A body that is no change to record, and why (the API answers 202)."""

    reason: str


Read = Received | NotRecorded


def source_of(github_event: str | None, declared: str | None, body: object) -> Source:
    """The format of a body: GitHub's when it names a GitHub event, the declared one
    (``X-Opsgate-Source``), Argo CD's for the documented template's shape, else generic."""
    if github_event is not None:
        return "github"
    if declared is not None:
        if declared not in SOURCES:
            raise InvalidChange("this change", [f"X-Opsgate-Source must be generic, argocd or "
                                                f"github, not {_quoted(declared)}"])
        return declared
    if isinstance(body, Mapping) and "app" in body and "finishedAt" in body:
        return "argocd"
    return "generic"


def parsed(body: bytes, source: Source) -> Any:
    """The JSON of a body; ``InvalidChange`` when it is none (GitHub's form encoding included)."""
    try:
        return loads(body)
    except ValueError as exc:  # not UTF-8, not JSON, NaN or ±Infinity, nested too deep
        hint = " (set the webhook's content type to application/json)" \
            if source == "github" else ""
        raise InvalidChange(WHAT[source], [f"the body is not JSON{hint}: "
                                           f"{shortened(str(exc), 120)}"]) from None


def read_change(source: Source, body: object, received_at: datetime,
                github_event: str | None = None) -> Read:
    """The change ``body`` describes in ``source``'s format, received at ``received_at``."""
    if not isinstance(body, Mapping):
        raise InvalidChange(WHAT[source], ["the body must be a JSON object"])
    if source == "argocd":
        return _argocd(_Fields(body), received_at)
    if source == "github":
        return _github(github_event, _Fields(body), received_at)
    return _generic(_Fields(body), received_at)


def _generic(fields: _Fields, received_at: datetime) -> Read:
    change_id = fields.name("id", ID_MAX)
    service = fields.name("service", NAME_MAX)
    kind = fields.name("kind", 16)
    if kind and kind not in KINDS:
        fields.problems.append(f"kind must be deploy or config, not {_quoted(kind)}")
    version = fields.name("version", VERSION_MAX)
    summary = fields.words("summary", SUMMARY_MAX)
    actor = fields.words("actor", ACTOR_MAX)
    happened_at = fields.moment("at")
    namespace = fields.namespace("namespace")
    url = fields.link("url")
    target, before, after = fields.target("target"), fields.data("before"), fields.data("after")
    fields.check("generic")
    return _received(Change(change_id, "generic", cast(Kind, kind), service, None, namespace,
                            version, summary, actor, url, happened_at, received_at, "", target,
                            before, after), (service,))


def _argocd(fields: _Fields, received_at: datetime) -> Read:
    phase = fields.name("phase", 32)
    if phase and phase != "Succeeded":
        return NotRecorded(f"the Argo CD operation's phase is {_quoted(phase)}: only a "
                           "Succeeded sync is recorded as a change")
    app = fields.name("app", NAME_MAX)
    revision = fields.name("revision", VERSION_MAX)
    finished = fields.moment("finishedAt")
    namespace = fields.namespace("namespace")
    actor = fields.words("initiatedBy", ACTOR_MAX, required=False) or "argocd (automated sync)"
    url = fields.link("url")
    target = fields.target("target")
    before = fields.name("previousRevision", VERSION_MAX, required=False)
    fields.check("argocd")
    where = f" in {namespace}" if namespace else ""
    summary = cut(f"Argo CD synced {app} to {revision}{where}", SUMMARY_MAX)
    change_id = _derived("argocd", f"{app}:{revision}:{finished.isoformat()}")
    return _received(Change(change_id, "argocd", "deploy", app, None, namespace, revision,
                            summary, actor, url, finished, received_at, "", target, before,
                            revision), (app,))


def _github(event: str | None, fields: _Fields, received_at: datetime) -> Read:
    if event not in (None, "deployment_status"):
        return NotRecorded(f"GitHub's {_quoted(event or '')} event is no deploy: only "
                           "deployment_status events are recorded")
    state = fields.name("deployment_status.state", 32)
    if state and state != "success":
        return NotRecorded(f"the deployment status is {_quoted(state)}: only 'success' is "
                           "recorded as a deploy")
    deployment_id = fields.name("deployment.id", 32)
    status_id = fields.name("deployment_status.id", 32)
    payload = fields.within("deployment.payload")
    service, names, environment = _github_service(fields, payload)
    namespace = payload.namespace("deployment.payload.namespace")
    version, sha = _github_version(fields)
    happened_at = fields.moment("deployment_status.created_at")
    target = payload.target("deployment.payload.target")
    before = payload.data("deployment.payload.before")
    after = payload.data("deployment.payload.after")
    fields.check("github")
    actor = (fields.words("deployment.creator.login", ACTOR_MAX, required=False)
             or fields.words("sender.login", ACTOR_MAX, required=False) or "github")
    url = (fields.link("deployment_status.log_url") or fields.link("deployment_status.target_url")
           or fields.link("deployment_status.environment_url"))
    return _received(Change(_derived("github", f"{deployment_id}/{status_id}"), "github",
                            "deploy", service, None, namespace, version,
                            _github_summary(fields, version, sha, environment), actor, url,
                            happened_at, received_at, "", target, before,
                            version if after is None else after), names)


def _github_service(fields: _Fields, payload: _Fields) -> tuple[str, tuple[str, ...], str | None]:
    """The service a deployment names (its payload's ``service``, else the repository's name),
    the names the catalog is asked for in turn (payload service, environment, repository) and
    the environment."""
    named = payload.name("deployment.payload.service", NAME_MAX, required=False)
    environment = fields.name("deployment.environment", NAME_MAX, required=False)
    repository = fields.name("repository.name", NAME_MAX, required=named is None)
    names = tuple(dict.fromkeys(name for name in (named, environment, repository) if name))
    return named or repository or "", names, environment


def _github_version(fields: _Fields) -> tuple[str, str | None]:
    """The deployed ref (a tag, a branch), else its sha when the ref is missing or too long."""
    sha = fields.name("deployment.sha", 64, required=False)
    ref = fields.value("deployment.ref")
    if isinstance(ref, str) and ref.strip() and len(ref) <= VERSION_MAX and ref.isprintable():
        return storable(ref.strip()), sha
    if sha is None:
        fields.problems.append("deployment.ref (one line of at most 200 characters) and "
                               "deployment.sha are missing")
    return sha or "", sha


def _github_summary(fields: _Fields, version: str, sha: str | None,
                    environment: str | None) -> str:
    task = fields.words("deployment.task", 100, required=False) or "deploy"
    said = (fields.words("deployment_status.description", SUMMARY_MAX, required=False)
            or fields.words("deployment.description", SUMMARY_MAX, required=False))
    commit = f" ({sha[:12]})" if sha and sha != version else ""
    to = f" to {environment}" if environment else ""
    return cut(f"{task} of {version}{commit}{to}" + (f": {said}" if said else ""), SUMMARY_MAX)


def _received(change: Change, names: tuple[str, ...]) -> Received:
    return Received(replace(change, fingerprint=fingerprint(change, names)), names)


def fingerprint(change: Change, names: tuple[str, ...] = ()) -> str:
    """SHA-256 of what the body said: not its catalog component (the catalog may change between
    a delivery and its retry), not when it arrived."""
    said = change.as_dict()
    for local in ("component", "received_at", "fingerprint"):
        del said[local]
    if said["after"] == said["version"]:  # Argo CD's, GitHub's: the version said it already
        said["after"] = None
    for unsaid in ("target", "before", "after"):  # absent: as fingerprinted before they existed
        if said[unsaid] is None:
            del said[unsaid]
    said["names"] = list(names)
    text = json.dumps(said, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _derived(source: Source, identity: str) -> str:
    """The change id of a webhook's body: ``source:identity``, a digest when that is too long."""
    change_id = f"{source}:{identity}"
    if len(change_id) <= ID_MAX:
        return change_id
    return f"{source}:sha256:{hashlib.sha256(identity.encode()).hexdigest()}"


def _storable_json(value: Any) -> Any:
    """``value`` with every text in it, keys included, made storable."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, Mapping):
        return {storable(str(key)): _storable_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_storable_json(item) for item in value]
    return value


def _quoted(text: str) -> str:
    return repr(shortened(text, 60))


class _Fields:
    """A JSON object's fields by dotted path, read as a change needs them; every problem found
    is kept in ``problems`` (shared with ``within``), and ``check`` raises them together."""

    def __init__(self, body: Mapping[str, Any], problems: list[str] | None = None,
                 prefix: str = "") -> None:
        self.body = body
        self.problems = [] if problems is None else problems
        self.prefix = prefix

    def value(self, path: str) -> Any:
        here: Any = self.body
        for part in path.removeprefix(self.prefix).split("."):
            if not isinstance(here, Mapping):
                return None
            here = here.get(part)
        return None if here == ABSENT else here

    def within(self, path: str) -> _Fields:
        """The object at ``path`` (a JSON object, or text holding one, as GitHub's deployment
        payload may be) read with the same problems; empty when it is neither."""
        found = self.value(path)
        if isinstance(found, str):
            try:
                found = loads(found)
            except ValueError:
                found = None
        return _Fields(found if isinstance(found, Mapping) else {}, self.problems, f"{path}.")

    @overload
    def name(self, path: str, limit: int) -> str: ...

    @overload
    def name(self, path: str, limit: int, *, required: Literal[False]) -> str | None: ...

    @overload
    def name(self, path: str, limit: int, *, required: bool) -> str | None: ...

    def name(self, path: str, limit: int, *, required: bool = True) -> str | None:
        """An identifier (a number reads as its digits): one printable line within ``limit``
        characters, never cut. Missing: a problem when ``required`` (and ""), else None."""
        found = self.value(path)
        if isinstance(found, int) and not isinstance(found, bool):
            found = str(found)
        if found is None or (isinstance(found, str) and not found.strip()):
            return self._missing(path, required)
        if not isinstance(found, str) or not found.strip().isprintable():
            self.problems.append(f"{path} must be text on one line")
            return ""
        if len(found.strip()) > limit:
            self.problems.append(f"{path} is over {limit} characters")
            return ""
        return storable(found.strip())

    @overload
    def words(self, path: str, limit: int) -> str: ...

    @overload
    def words(self, path: str, limit: int, *, required: Literal[False]) -> str | None: ...

    def words(self, path: str, limit: int, *, required: bool = True) -> str | None:
        """What someone wrote: made storable and cut to ``limit`` characters, never refused
        for what it says. Missing: a problem when ``required`` (and ""), else None."""
        found = self.value(path)
        if isinstance(found, str) and found.strip():
            return cut(found.strip(), limit)
        if found not in (None, "") and required:
            self.problems.append(f"{path} must be text")
            return ""
        return self._missing(path, required)

    def _missing(self, path: str, required: bool) -> str | None:
        if required:
            self.problems.append(f"{path} is missing")
            return ""
        return None

    def moment(self, path: str) -> datetime:
        """An ISO 8601 time with its zone, in UTC (the epoch after a problem)."""
        found = self.value(path)
        if not isinstance(found, str) or not found.strip():
            self.problems.append(f"{path} is missing" if found in (None, "")
                                 else f"{path} must be text")
            return EPOCH
        try:
            moment = datetime.fromisoformat(found.strip())
        except ValueError:
            moment = None
        if moment is None or moment.tzinfo is None:
            self.problems.append(f"{path} {_quoted(found)} is not an ISO 8601 time with its "
                                 "zone, such as 2026-11-27T14:02:00Z")
            return EPOCH
        return moment.astimezone(UTC)

    def namespace(self, path: str) -> str | None:
        """A Kubernetes namespace, or None when none is given."""
        found = self.name(path, 63, required=False)
        if found is not None and not NAMESPACE.match(found):
            self.problems.append(f"{path} {_quoted(found)} is not a Kubernetes namespace name "
                                 "(lowercase letters, digits and '-', at most 63)")
            return None
        return found

    def link(self, path: str) -> str | None:
        """An http(s) link without credentials; anything else is not kept as a link."""
        found = self.value(path)
        kept = without_credentials(storable(found)) if isinstance(found, str) else ""
        return kept or None

    def target(self, path: str) -> str | None:
        """The object a change changed, ``KIND/NAME`` (``TARGET_FORM``), or None when none is
        given."""
        found = self.name(path, 300, required=False)
        if not found:
            return None
        if not TARGET.fullmatch(found):
            self.problems.append(f"{path} must be {TARGET_FORM}, not {_quoted(found)}")
            return None
        return found

    def data(self, path: str) -> Any:
        """A JSON value a sender wrote (a version, a ConfigMap's data, a flag's rollout), its
        text made storable, at most ``VALUE_MAX`` characters as compact JSON; None when none."""
        found = _storable_json(self.value(path))
        if found is None:
            return None
        size = len(json.dumps(found, separators=(",", ":"), ensure_ascii=False))
        if size > VALUE_MAX:
            self.problems.append(f"{path} is over {VALUE_MAX} characters as JSON ({size})")
            return None
        return found

    def check(self, source: Source) -> None:
        if self.problems:
            raise InvalidChange(WHAT[source], self.problems)
