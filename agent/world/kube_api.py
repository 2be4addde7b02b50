"""A stand-in Kubernetes API: a recorded world on 127.0.0.1, for the demo, the evaluation and the
investigator's tests (a cluster cannot run on these machines), served by a real HTTPS server
speaking the Kubernetes REST API as far as the official Python client and ``kubectl get`` need
(discovery, list/get with label and field selectors, pod logs, ``Status`` errors), answering from
a fixed set of objects and recording every request, so a test can show only reads were sent.
A world made ``writable`` also takes merge patches (``agent/world/kube_writes.py``).

A cluster cannot run on these machines; this is the one fake of the investigator's peers. The
world is a list of objects as the API serves them (Pods, Deployments, ReplicaSets, HPAs, Events)
plus container logs; ``agent/world/kube_objects.py`` builds the payments and checkout one.

It serves TLS with a certificate of its own (a CA made per process): ``kubectl``, like any
client-go program, sends no bearer token over plain HTTP, and a cluster's API is HTTPS anyway."""

from __future__ import annotations

import base64
import copy
import functools
import ipaddress
import json
import re
import ssl
import tempfile
import threading
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml  # type: ignore[import-untyped]
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

TOKEN = "recorded-world-reader-token"  # noqa: S105 (the tests' credential; the demo makes one)
SERVER_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.4", "gitCommit": "recorded",
                  "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                  "goVersion": "go1.23.8", "compiler": "gc", "platform": "linux/amd64"}


@dataclass(frozen=True)
class Resource:
    """One resource the world serves: where it lives in the API and what it is called."""

    plural: str
    group: str  # "" for the core group
    version: str
    kind: str
    short_names: tuple[str, ...] = ()
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def listing(self) -> dict[str, Any]:
        """Its entry in an ``APIResourceList``."""
        entry: dict[str, Any] = {"name": self.plural, "singularName": self.kind.lower(),
                                 "namespaced": self.namespaced, "kind": self.kind,
                                 "verbs": ["get", "list"]}
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        return entry


RESOURCES = {r.kind: r for r in (
    Resource("pods", "", "v1", "Pod", ("po",)),
    Resource("events", "", "v1", "Event", ("ev",)),
    Resource("namespaces", "", "v1", "Namespace", ("ns",), namespaced=False),
    Resource("deployments", "apps", "v1", "Deployment", ("deploy",)),
    Resource("replicasets", "apps", "v1", "ReplicaSet", ("rs",)),
    Resource("horizontalpodautoscalers", "autoscaling", "v2", "HorizontalPodAutoscaler",
             ("hpa",)),
    Resource("configmaps", "", "v1", "ConfigMap", ("cm",)),
    Resource("featureflags", "core.openfeature.dev", "v1beta1", "FeatureFlag", ("ff",)),
)}
# the group versions /apis names (each served)
GROUPS = {"apps": "v1", "autoscaling": "v2", "core.openfeature.dev": "v1beta1"}


@dataclass(frozen=True)
class Request:
    """One request the world received, as sent."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes = b""
    content_type: str = ""

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


@dataclass
class World:
    """The objects the API serves, and the logs of each container: ``logs[(namespace, pod)]``
    maps a container (``api``, or ``api:previous`` for the run before its last restart) to
    lines that each start with their RFC 3339 time, as ``kubectl logs --timestamps`` shows."""

    objects: list[dict[str, Any]]
    logs: dict[tuple[str, str], dict[str, list[str]]] = field(default_factory=dict)
    forbidden: set[str] = field(default_factory=set)  # namespaces whose reads answer 403
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    @classmethod
    def of(cls, recorded: Mapping[str, Any]) -> World:
        """A world from its record: ``{"objects": [...], "logs": {"namespace/pod": {container:
        [lines]}}}`` (what ``tests/support/kube_payments.py`` builds, or a YAML file holds)."""
        logs: dict[tuple[str, str], dict[str, list[str]]] = {}
        for where, containers in (recorded.get("logs") or {}).items():
            namespace, pod = where.split("/", 1)
            logs[(namespace, pod)] = {c: list(lines) for c, lines in containers.items()}
        return cls(copy.deepcopy(list(recorded["objects"])), logs)

    @classmethod
    def load(cls, path: Path) -> World:
        """A world from a YAML file of the same shape."""
        return cls.of(yaml.safe_load(path.read_text()))

    def of_kind(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        if kind == "Namespace":
            return [_namespace(name) for name in self.namespaces()]
        return [o for o in self.objects if o["kind"] == kind
                and (namespace is None or o["metadata"].get("namespace") == namespace)]

    def namespaces(self) -> list[str]:
        return sorted({o["metadata"]["namespace"] for o in self.objects
                       if "namespace" in o["metadata"]})

    def resource_version(self) -> str:
        versions = [int(o["metadata"].get("resourceVersion", "0")) for o in self.objects]
        return str(max(versions, default=1))


def _namespace(name: str) -> dict[str, Any]:
    return {"kind": "Namespace", "apiVersion": "v1",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "status": {"phase": "Active"}}


class _Refusal(Exception):
    """An answer other than 200: a ``Status`` object as the API server writes it."""

    def __init__(self, code: int, reason: str, message: str,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                     "status": "Failure", "message": message, "reason": reason,
                                     "code": code}
        if details:
            self.body["details"] = dict(details)


def not_found(resource: Resource, name: str) -> _Refusal:
    return _Refusal(404, "NotFound", f'{resource.plural}.{resource.group or ""}'.rstrip(".")
                   + f' "{name}" not found', {"name": name, "group": resource.group,
                                                "kind": resource.plural})


class KubeWorldServer:
    """The world served on 127.0.0.1 at ``base`` (HTTPS unless ``tls=False``; bearer
    ``token``)."""

    def __init__(self, world: World, token: str = TOKEN, *, tls: bool = True,
                 writable: bool = False) -> None:
        self.world = world
        self.writable = writable
        self.token = token
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._http.daemon_threads = True
        self.port = self._http.server_address[1]
        self.config: Path | None = None  # its kubeconfig, when the fixture wrote one
        self.ca_pem: bytes | None = None
        if tls:
            self.ca_pem, context = _tls()
            self._http.socket = context.wrap_socket(self._http.socket, server_side=True)
        self.base = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,),
                                        daemon=True)

    def start(self) -> KubeWorldServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)

    # -- what tests ask of it ---------------------------------------------------------------

    def seen(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def writes(self) -> list[Request]:
        """Every request that was not a read (GET): none, when only reads were sent."""
        return [r for r in self.seen() if r.method != "GET"]

    def reads_of(self, path_part: str) -> list[Request]:
        return [r for r in self.seen() if path_part in r.path]

    def kubeconfig(self, path: Path, *, token: str | None = None,
                   namespace: str = "payments") -> Path:
        """A kubeconfig whose current context ``recorded-world`` reads this server with
        ``token`` (default: the right one); context ``wrong-token`` sends a revoked one."""
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "recorded-world", "cluster": self._cluster()}],
            "users": [{"name": "opsgate-reader", "user": {"token": token or self.token}},
                      {"name": "revoked", "user": {"token": "revoked-token"}}],
            "contexts": [
                {"name": "recorded-world", "context": {"cluster": "recorded-world",
                                                       "user": "opsgate-reader",
                                                       "namespace": namespace}},
                {"name": "wrong-token", "context": {"cluster": "recorded-world",
                                                    "user": "revoked", "namespace": namespace}},
            ],
            "current-context": "recorded-world",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _cluster(self) -> dict[str, str]:
        cluster = {"server": self.base}
        if self.ca_pem is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        return cluster

    # -- answering --------------------------------------------------------------------------

    def record(self, method: str, target: str, body: bytes = b"",
               content_type: str = "") -> Request:
        parts = urlsplit(target)
        request = Request(method, unquote(parts.path), parse_qs(parts.query), body, content_type)
        with self._lock:
            self.requests.append(request)
        return request

    def answer(self, request: Request, authorization: str | None) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request."""
        try:
            if authorization != f"Bearer {self.token}":
                raise _Refusal(401, "Unauthorized", "Unauthorized")
            if request.method == "PATCH" and self.writable:
                from agent.world.kube_writes import patch

                with self._lock:
                    return patch(self.world, request)
            if request.method != "GET":
                raise _Refusal(405, "MethodNotAllowed", "the server does not allow this method "
                              "on the requested resource (this recorded world only reads)")
            return _route(self.world, request, self.base)
        except _Refusal as refusal:
            return refusal.code, "application/json", json.dumps(refusal.body).encode()


def _handler_for(server: KubeWorldServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            request = server.record(self.command, self.path, body,
                                    self.headers.get("Content-Type") or "")
            status, content_type, body = server.answer(request,
                                                       self.headers.get("Authorization"))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            with suppress(BrokenPipeError, ConnectionResetError):
                if self.command != "HEAD":
                    self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


# -- the API's paths --------------------------------------------------------------------------

_OBJECTS = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[a-z.0-9]+)/(?P<version>v[0-9a-z]+))"
                      r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>[a-z]+)"
                      r"(?:/(?P<name>[^/]+)(?:/(?P<sub>log|scale))?)?$")


def _route(world: World, request: Request, base: str) -> tuple[int, str, bytes]:
    path = request.path.rstrip("/") or "/"
    discovery = _discovery(path, base)
    if discovery is not None:
        return _json(discovery)
    match = _OBJECTS.match(path)
    if match is None:
        raise _Refusal(404, "NotFound", "the server could not find the requested resource")
    resource = _resource(match["group"] or "", match["version"] or match["core"],
                         match["plural"])
    namespace, name = match["namespace"], match["name"]
    if namespace is not None and namespace in world.forbidden:
        verb = "get" if name else "list"
        raise _Refusal(403, "Forbidden", f'{resource.plural} is forbidden: User '
                      f'"system:serviceaccount:opsgate:opsgate-reader" cannot {verb} resource '
                      f'"{resource.plural}" in API group "{resource.group}" in the namespace '
                      f'"{namespace}"', {"kind": resource.plural})
    if request.param("watch") in ("true", "1"):
        raise _Refusal(400, "BadRequest", "this recorded world serves no watches")
    if match["sub"] == "log":
        return _logs(world, request, namespace or "default", name or "")
    if match["sub"] == "scale":
        from agent.world.kube_writes import scale_of

        return _json(scale_of(_one(world, resource, namespace, name or "")))
    if name is not None:
        return _json(_one(world, resource, namespace, name))
    return _json(_list(world, resource, namespace, request))


def _resource(group: str, version: str, plural: str) -> Resource:
    for resource in RESOURCES.values():
        if (resource.group, resource.version, resource.plural) == (group, version, plural):
            return resource
    raise _Refusal(404, "NotFound", "the server could not find the requested resource")


def _discovery(path: str, base: str) -> dict[str, Any] | None:
    if path == "/version":
        return SERVER_VERSION
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": base.removeprefix("http://")}]}
    if path == "/apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": group, "versions": [_version(group, v)], "preferredVersion":
             _version(group, v)} for group, v in GROUPS.items()]}
    served = {"/api/v1": ("", "v1"),
              **{f"/apis/{g}/{v}": (g, v) for g, v in GROUPS.items()}}
    if path not in served:
        return None
    group, version = served[path]
    entries = [r.listing() for r in RESOURCES.values() if (r.group, r.version) == served[path]]
    if not group:
        entries.append({"name": "pods/log", "singularName": "", "namespaced": True,
                        "kind": "Pod", "verbs": ["get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": entries}


def _version(group: str, version: str) -> dict[str, str]:
    return {"groupVersion": f"{group}/{version}", "version": version}


def _one(world: World, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
    for found in world.of_kind(resource.kind, namespace):
        if found["metadata"]["name"] == name:
            return _served(found, resource)
    raise not_found(resource, name)


def _list(world: World, resource: Resource, namespace: str | None,
          request: Request) -> dict[str, Any]:
    labels = _selector(request.param("labelSelector") or "", "label")
    fields = _selector(request.param("fieldSelector") or "", "field")
    found = [o for o in world.of_kind(resource.kind, namespace)
             if all(test(o["metadata"].get("labels") or {}) for test in labels)
             and all(test(_fields(o)) for test in fields)]
    found.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
    start = int(request.param("continue") or 0)
    limit = int(request.param("limit") or 0) or len(found)
    page = found[start:start + limit]
    metadata: dict[str, Any] = {"resourceVersion": world.resource_version()}
    if start + limit < len(found):
        metadata["continue"] = str(start + limit)
        metadata["remainingItemCount"] = len(found) - start - limit
    items = [_served(o, resource) for o in page]
    for item in items:  # a list's items carry no kind of their own, as the API serves them
        item.pop("kind", None)
        item.pop("apiVersion", None)
    return {"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
            "metadata": metadata, "items": items}


def _served(found: Mapping[str, Any], resource: Resource) -> dict[str, Any]:
    served = copy.deepcopy(dict(found))
    served["kind"], served["apiVersion"] = resource.kind, resource.api_version
    return served


Test = Callable[[Mapping[str, str]], bool]
_TERM = re.compile(r"^\s*(?P<key>[A-Za-z0-9_./-]+)\s*(?P<op>==|!=|=)\s*(?P<value>[^,]*?)\s*$")
_EXISTS = re.compile(r"^\s*(?P<not>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*$")


def _selector(text: str, what: str) -> list[Test]:
    """The tests of a label or field selector: ``k=v``, ``k==v``, ``k!=v`` (and, for labels,
    ``k`` and ``!k``), joined by commas; set-based terms are refused as the server would not."""
    tests: list[Test] = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        equality = _TERM.match(term)
        exists = _EXISTS.match(term)
        if equality:
            key, value, negated = equality["key"], equality["value"], equality["op"] == "!="
            tests.append(functools.partial(_equals, key, value, negated))
        elif exists and what == "label":
            key, negated = exists["key"], bool(exists["not"])
            tests.append(functools.partial(_exists, key, negated))
        else:
            raise _Refusal(400, "BadRequest", f"unable to parse requirement: {term!r} (this "
                          f"recorded world reads equality {what} selectors)")
    return tests


def _fields(found: Mapping[str, Any]) -> dict[str, str]:
    """The object's fields by dotted path (``involvedObject.name``, ``metadata.name``)."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        elif not isinstance(value, list):
            flat[prefix] = str(value)
    walk("", found)
    return flat


# -- logs ---------------------------------------------------------------------------------------

def _logs(world: World, request: Request, namespace: str, pod: str) -> tuple[int, str, bytes]:
    found = _one(world, RESOURCES["Pod"], namespace, pod)
    containers = [c["name"] for c in found["spec"]["containers"]]
    container = request.param("container")
    if container is None:
        if len(containers) != 1:
            raise _Refusal(400, "BadRequest", f"a container name must be specified for pod "
                          f"{pod}, choose one of: [{' '.join(containers)}]")
        container = containers[0]
    if container not in containers:
        raise _Refusal(400, "BadRequest", f"container {container} is not valid for pod {pod}")
    recorded = world.logs.get((namespace, pod), {})
    key = f"{container}:previous" if request.param("previous") == "true" else container
    if key not in recorded and key != container:
        raise _Refusal(400, "BadRequest", f'previous terminated container "{container}" in pod '
                      f'"{pod}" not found')
    lines = list(recorded.get(key, []))
    since = request.param("sinceSeconds")
    if since is not None:
        cutoff = world.clock() - timedelta(seconds=int(since))
        lines = [line for line in lines if _stamp(line) >= cutoff]
    tail = request.param("tailLines")
    if tail is not None:
        lines = lines[-int(tail):] if int(tail) else []
    if request.param("timestamps") != "true":
        lines = [line.split(" ", 1)[1] if " " in line else "" for line in lines]
    body = "".join(f"{line}\n" for line in lines).encode()
    limit = request.param("limitBytes")
    if limit is not None:
        body = body[:int(limit)]
    return 200, "text/plain", body


def _stamp(line: str) -> datetime:
    return datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00"))


def _json(body: Mapping[str, Any]) -> tuple[int, str, bytes]:
    return 200, "application/json", json.dumps(body).encode()


# -- TLS ----------------------------------------------------------------------------------------

@functools.cache
def _tls() -> tuple[bytes, ssl.SSLContext]:
    """A CA of this test process and a certificate it signed for 127.0.0.1: (the CA's PEM, a
    server context serving that certificate)."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "recorded-world-ca")])
    now = datetime.now(UTC)
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory(prefix="kube-world-tls-") as where:  # read, then gone
        folder = Path(where)
        (folder / "server.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        (folder / "server.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        context.load_cert_chain(folder / "server.pem", folder / "server.key")
    return ca.public_bytes(serialization.Encoding.PEM), context


# -- building worlds and serving them in tests ------------------------------------------------


def _equals(key: str, value: str, negated: bool, found: Mapping[str, str]) -> bool:
    return (found.get(key) == value) != negated


def _exists(key: str, negated: bool, found: Mapping[str, str]) -> bool:
    return (key in found) != negated
