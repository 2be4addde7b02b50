"""The investigator's Kubernetes reads through the official client: a component's pods,
deployments, ReplicaSets and HPAs, their events, a container's recent logs and a deployment's
rollout history — read verbs only, each narrowed to one ``Target`` (its namespace and label
selector) and refused with ``OutOfScope`` outside it."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import urllib3
import yaml  # type: ignore[import-untyped]
from pydantic import ValidationError

from core.errors import Unavailable
from core.investigate.kube_answers import (
    TEXT_CHARS,
    cut,
    deployment_answer,
    event_answer,
    event_time,
    hpa_answer,
    images_of,
    labels_match,
    meta_of,
    pod_answer,
    replica_set_answer,
    revision_answer,
    revision_of,
    troubled_first,
)
from core.investigate.scope import OutOfScope, Target
from core.settings_errors import InvalidSettings

# The official client loads its ~1000 models on first use, seconds of it: only a configured
# reader pays that (``from_settings``), never an import of this module.
if TYPE_CHECKING:
    from kubernetes.client import (
        ApiClient,
        V1Deployment,
        V1ObjectReference,
        V1Pod,
        V1PodList,
        V1ReplicaSet,
        V1ReplicaSetList,
    )
    from kubernetes.client.exceptions import ApiException

KINDS = ("pods", "deployments", "replicasets", "hpas")
MOST_OBJECTS = 50
MOST_EVENTS = 50
MOST_LINES = 500
LONGEST_SINCE_S = 6 * 3600
LOG_BYTES = MOST_LINES * TEXT_CHARS * 8  # a bound on one log read, far above 500 cut lines
READ_LIMIT = 500  # the most objects one list asks the API for (the rest are counted)
REQUEST_TIMEOUT_S = 10.0
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
CONTAINER = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# The suffixes a Deployment gives its ReplicaSets (pod-template-hash) and their pods.
_HASH = "[bcdfghjklmnpqrstvwxz2456789]"
T = TypeVar("T")
Found = tuple[list[dict[str, Any]], int]  # the answers, and how many more the API holds


class KubernetesUnavailable(Unavailable):
    """The Kubernetes API could not be reached, or refused opsgate's credentials (401/403)."""

    code = "kubernetes_unavailable"


class _Missing(KubernetesUnavailable):
    """A 404: the object is not there (the callers that read one object say so in scope words)."""


@dataclass(frozen=True)
class RolloutState:
    """A deployment as a rollout would find it: each container's image now, its current
    revision, and the images of each revision it still holds (its ReplicaSets)."""

    images: Mapping[str, str]
    revision: int | None
    revisions: Mapping[int, Mapping[str, str]]


IN_CLUSTER = "in-cluster"
"""``OPSGATE_KUBECONFIG``'s value that reads with the pod's own service account."""


class KubernetesReader:
    """Read-only looks at one cluster through its own ``ApiClient`` (never the client's global
    default configuration); every request carries ``timeout_s``."""

    def __init__(self, api: ApiClient, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        from kubernetes.client import AppsV1Api, AutoscalingV2Api, CoreV1Api

        self.api = api
        self.timeout_s = timeout_s
        self.host = str(api.configuration.host)
        self._core, self._apps = CoreV1Api(api), AppsV1Api(api)
        self._autoscaling = AutoscalingV2Api(api)

    @classmethod
    def from_settings(cls, kubeconfig: str | None, context: str | None,
                      timeout_s: float = REQUEST_TIMEOUT_S) -> KubernetesReader | None:
        """The reader of ``kubeconfig`` (its ``context``, else its current one), or of the pod's
        service account when it is ``in-cluster``; None when it is unset (fail closed: running
        in a cluster does not by itself let the agent read it). ``InvalidSettings`` for a
        kubeconfig or service account that cannot be used."""
        if not kubeconfig:
            return None
        in_cluster = kubeconfig == IN_CLUSTER
        from kubernetes import config as kube_config
        from kubernetes.client import ApiClient, Configuration
        from kubernetes.config.config_exception import ConfigException

        configuration = Configuration()
        try:
            if not in_cluster:
                kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=os.path.expanduser(kubeconfig), context=context,
                    client_configuration=configuration, persist_config=False)
            else:
                kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration)
        except (ConfigException, OSError, ValueError, TypeError, yaml.YAMLError) as exc:
            where = "the in-cluster credentials" if in_cluster else f"the kubeconfig {kubeconfig}"
            raise InvalidSettings([f"{where} cannot be used to read Kubernetes: {exc}"]) from exc
        configuration.retries = 1  # a read the model waits on fails fast and says so
        return cls(ApiClient(configuration), timeout_s)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    # -- the reads --------------------------------------------------------------------------

    def objects(self, target: Target, kind: str) -> dict[str, Any]:
        """The target's ``kind`` (pods, deployments, replicasets, hpas) in its namespace, at
        most 50 (pods in trouble first), with how many were left out."""
        namespace = _namespace_of(target)
        readers: Mapping[str, Callable[[Target, str], Found]] = {
            "pods": self._pods, "deployments": self._deployments,
            "replicasets": self._replica_sets, "hpas": self._hpas}
        if kind not in readers:
            raise OutOfScope(f"{kind!r} is not a kind the investigator reads; ask for one of "
                             f"{', '.join(KINDS)}")
        found, unread = readers[kind](target, namespace)
        return {"kind": kind, "namespace": namespace, "selector": _selector_words(target),
                kind: found[:MOST_OBJECTS],
                "left_out": max(0, len(found) - MOST_OBJECTS) + unread}

    def events(self, target: Target, since: datetime) -> dict[str, Any]:
        """Events since ``since`` about the target's pods, ReplicaSets, deployment and HPAs
        (the whole namespace's when its selector is empty), newest first, at most 50."""
        namespace = _namespace_of(target)
        since = since if since.tzinfo else since.replace(tzinfo=UTC)
        ours = None if not target.selector else self._names_of(target, namespace)
        listed = self._call(f"list the events in namespace {namespace}",
                            self._core.list_namespaced_event, namespace)
        found = [e for e in listed.items if (event_time(e) or since) >= since
                 and (ours is None or _concerns(e.involved_object, ours, target.workload))]
        found.sort(key=lambda e: event_time(e) or since, reverse=True)
        return {"namespace": namespace, "since": since.isoformat().replace("+00:00", "Z"),
                "events": [event_answer(e) for e in found[:MOST_EVENTS]],
                "left_out": max(0, len(found) - MOST_EVENTS)}

    def logs(self, target: Target, pod: str, container: str | None = None, lines: int = 100,
             since_s: int = 3600) -> dict[str, Any]:
        """The last ``lines`` (≤ 500) of a container of ``pod`` from the last ``since_s``
        seconds (≤ 6 h); the pod must be the target's. Each line is cut at 500 characters."""
        namespace = _namespace_of(target)
        lines, since_s, notes = _bounded(lines, since_s)
        found = self._pod_of(target, namespace, pod)
        chosen = _container_of(found, container, target)
        text = self._call(f"read the logs of container {chosen} of pod {pod} in namespace "
                          f"{namespace}", self._core.read_namespaced_pod_log, pod, namespace,
                          container=chosen, tail_lines=lines, since_seconds=since_s,
                          limit_bytes=LOG_BYTES)
        if len(text.encode()) >= LOG_BYTES:
            notes.append(f"the log stopped at {LOG_BYTES} bytes; the newest lines may be missing")
        kept = text.splitlines()
        long_lines = sum(len(line) > TEXT_CHARS for line in kept)
        if long_lines:
            notes.append(f"{long_lines} line(s) longer than {TEXT_CHARS} characters were cut")
        answer: dict[str, Any] = {"namespace": namespace, "container": chosen,
                                  "tail_lines": lines, "since_s": since_s, "lines": len(kept),
                                  "log": "\n".join(cut(line) for line in kept)}
        return {**answer, "notes": notes} if notes else answer

    def rollout_history(self, target: Target, deployment: str | None = None) -> dict[str, Any]:
        """The revisions of ``deployment`` (default: the target's workload), oldest first: each
        ReplicaSet it owns with its images, creation time, change-cause and replicas."""
        namespace = _namespace_of(target)
        name = deployment or target.workload
        if name is None:
            raise OutOfScope(f"{target.name} names no deployment in the catalog "
                             "(annotation backstage.io/kubernetes-id); name the deployment")
        found = self._deployment_of(target, namespace, name)
        owned = self._owned_replica_sets(found, namespace)
        current = revision_of(meta_of(found))
        revisions = sorted((revision_answer(rs, current) for rs in owned),
                           key=lambda r: (r["revision"] is None, r["revision"] or 0))
        return {"deployment": name, "namespace": namespace, "current_revision": current,
                "revisions": revisions}

    def rollout_state(self, namespace: str, name: str) -> RolloutState | None:
        """The deployment ``namespace/name`` as a rollout step would change it (a dry run's
        reading: GETs only); None when there is no such deployment."""
        found = self._get(f"read deployment {name} in namespace {namespace}",
                          self._apps.read_namespaced_deployment, name, namespace)
        if found is None:
            return None
        revisions: dict[int, Mapping[str, str]] = {}
        for owned in self._owned_replica_sets(found, namespace):
            revision = revision_of(meta_of(owned))
            if revision is not None and owned.spec is not None:
                revisions[revision] = images_of(owned.spec.template)
        return RolloutState(images_of(found.spec.template if found.spec else None),
                            revision_of(meta_of(found)), revisions)

    # -- what belongs to the target -----------------------------------------------------------

    def _pods(self, target: Target, namespace: str) -> Found:
        listed = self._list_pods(target, namespace)
        return sorted(map(pod_answer, listed.items), key=troubled_first), _unread(listed)

    def _list_pods(self, target: Target, namespace: str) -> V1PodList:
        return self._call(f"list the pods in namespace {namespace}",
                          self._core.list_namespaced_pod, namespace, **_selected(target),
                          limit=READ_LIMIT)

    def _deployments(self, target: Target, namespace: str) -> Found:
        found, unread = self._list_deployments(target, namespace)
        return [deployment_answer(d) for d in found], unread

    def _list_deployments(self, target: Target,
                          namespace: str) -> tuple[list[V1Deployment], int]:
        """Those the selector finds, and the target's workload by its name (its own labels
        need not carry its pods' selector)."""
        what = f"list the deployments in namespace {namespace}"
        listed = self._call(what, self._apps.list_namespaced_deployment, namespace,
                            **_selected(target), limit=READ_LIMIT)
        found = {meta_of(d).name: d for d in listed.items}
        if target.selector and target.workload and target.workload not in found:
            named = self._call(what, self._apps.list_namespaced_deployment, namespace,
                               field_selector=f"metadata.name={target.workload}")
            found.update({meta_of(d).name: d for d in named.items})
        return [found[name] for name in sorted(n for n in found if n)], _unread(listed)

    def _replica_sets(self, target: Target, namespace: str) -> Found:
        listed = self._list_replica_sets(target, namespace)
        found = sorted(map(replica_set_answer, listed.items),
                       key=lambda rs: (rs["deployment"] or "", -(rs["revision"] or 0)))
        return found, _unread(listed)

    def _list_replica_sets(self, target: Target, namespace: str) -> V1ReplicaSetList:
        return self._call(f"list the replicasets in namespace {namespace}",
                          self._apps.list_namespaced_replica_set, namespace,
                          **_selected(target), limit=READ_LIMIT)

    def _hpas(self, target: Target, namespace: str) -> Found:
        """HPAs carry their app's labels less often than not: the target's are those whose
        labels match, or that scale its deployment."""
        listed = self._call(f"list the horizontal pod autoscalers in namespace {namespace}",
                            self._autoscaling.list_namespaced_horizontal_pod_autoscaler,
                            namespace, limit=READ_LIMIT)
        answers = [hpa_answer(h) for h in listed.items
                   if not target.selector or labels_match(meta_of(h).labels, target.selector)
                   or (target.workload is not None
                       and h.spec is not None and h.spec.scale_target_ref.kind == "Deployment"
                       and h.spec.scale_target_ref.name == target.workload)]
        return sorted(answers, key=lambda h: str(h["name"])), _unread(listed)

    def _names_of(self, target: Target, namespace: str) -> set[tuple[str, str]]:
        """(kind, name) of the target's pods, ReplicaSets, deployments and HPAs."""
        names = {("Pod", meta_of(p).name or "")
                 for p in self._list_pods(target, namespace).items}
        names |= {("ReplicaSet", meta_of(rs).name or "")
                  for rs in self._list_replica_sets(target, namespace).items}
        names |= {("Deployment", meta_of(d).name or "")
                  for d in self._list_deployments(target, namespace)[0]}
        names |= {("HorizontalPodAutoscaler", str(h["name"]))
                  for h in self._hpas(target, namespace)[0]}
        return names

    def _pod_of(self, target: Target, namespace: str, pod: str) -> V1Pod:
        if not NAME.match(pod):
            raise OutOfScope(f"{pod!r} is not a pod name; kube_objects with kind pods lists "
                             f"those of {target.name}")
        found = self._get(f"read pod {pod} in namespace {namespace}",
                          self._core.read_namespaced_pod, pod, namespace)
        if found is None:
            raise OutOfScope(f"there is no pod {pod} in namespace {namespace}; kube_objects "
                             f"with kind pods lists those of {target.name}")
        if not labels_match(meta_of(found).labels, target.selector):
            raise OutOfScope(f"pod {pod} is not {target.name}'s: its labels do not carry "
                             f"{target.selector_text}")
        return found

    def _deployment_of(self, target: Target, namespace: str, name: str) -> V1Deployment:
        if not NAME.match(name):
            raise OutOfScope(f"{name!r} is not a deployment name")
        found = self._get(f"read deployment {name} in namespace {namespace}",
                          self._apps.read_namespaced_deployment, name, namespace)
        if found is None:
            raise OutOfScope(f"there is no deployment {name} in namespace {namespace}")
        template = found.spec.template.metadata
        labelled = labels_match(meta_of(found).labels, target.selector) or labels_match(
            template.labels if template is not None else None, target.selector)
        if name != target.workload and not labelled:
            raise OutOfScope(f"deployment {name} is not {target.name}'s (that is "
                             f"{target.workload or 'none named'}; its pods do not carry "
                             f"{target.selector_text})")
        return found

    def _owned_replica_sets(self, deployment: V1Deployment,
                            namespace: str) -> list[V1ReplicaSet]:
        meta = meta_of(deployment)
        wanted = deployment.spec.selector.match_labels or {}
        selector = ",".join(f"{key}={value}" for key, value in sorted(wanted.items()))
        listed = self._call(f"list the replicasets of deployment {meta.name}",
                            self._apps.list_namespaced_replica_set, namespace,
                            **({"label_selector": selector} if selector else {}),
                            limit=READ_LIMIT)
        return [rs for rs in listed.items
                if any(o.kind == "Deployment" and o.uid == meta.uid
                       for o in meta_of(rs).owner_references or [])]

    # -- the API --------------------------------------------------------------------------------

    def _get(self, what: str, call: Callable[..., T], *args: Any) -> T | None:
        try:
            return self._call(what, call, *args)
        except _Missing:
            return None

    def _call(self, what: str, call: Callable[..., T], *args: Any, **params: Any) -> T:
        """``call`` with the timeout; what went wrong as a ``KubernetesUnavailable`` sentence."""
        from kubernetes.client.exceptions import ApiException

        try:
            return call(*args, **params, _request_timeout=self.timeout_s)
        except ApiException as exc:
            raise self._refusal(what, exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise KubernetesUnavailable(f"the Kubernetes API at {self.host} cannot be reached "
                                        f"to {what} ({_reason(exc)})") from exc
        except ValidationError as exc:
            raise KubernetesUnavailable(f"the Kubernetes API at {self.host} answered something "
                                        f"that is not a Kubernetes object when asked to "
                                        f"{what}") from exc

    def _refusal(self, what: str, exc: ApiException) -> KubernetesUnavailable:
        said = _status_message(exc)
        if exc.status == 401:
            return KubernetesUnavailable(
                f"the Kubernetes API at {self.host} refused opsgate's credentials (401 "
                f"Unauthorized) when asked to {what}: the kubeconfig's token or certificate "
                "is wrong or expired")
        if exc.status == 403:
            return KubernetesUnavailable(
                f"the Kubernetes API at {self.host} does not allow opsgate to {what} (403 "
                f"Forbidden: {said}); its role needs get and list on it")
        if exc.status == 404:
            return _Missing(f"the Kubernetes API at {self.host} has no such thing to {what} "
                            f"(404: {said})")
        if not exc.status:
            return KubernetesUnavailable(f"the Kubernetes API at {self.host} cannot be reached "
                                         f"to {what} ({cut(str(exc.reason), 200)})")
        return KubernetesUnavailable(f"the Kubernetes API at {self.host} answered {exc.status} "
                                     f"{exc.reason} when asked to {what}: {said}")


def _namespace_of(target: Target) -> str:
    if target.namespace is None:
        raise OutOfScope(f"{target.name} has no Kubernetes namespace in the catalog "
                         "(annotation backstage.io/kubernetes-namespace); nothing to read")
    return target.namespace


def _bounded(lines: int, since_s: int) -> tuple[int, int, list[str]]:
    """``lines`` and ``since_s`` within a log read's bounds, and a note for each that was
    not."""
    kept_lines = min(max(lines, 1), MOST_LINES)
    kept_since = min(max(since_s, 1), LONGEST_SINCE_S)
    notes = []
    if kept_lines != lines:
        notes.append(f"lines {lines} was set to {kept_lines} (a read asks for 1 to "
                     f"{MOST_LINES})")
    if kept_since != since_s:
        notes.append(f"since_s {since_s} was set to {kept_since} (a read looks back at most "
                     f"{LONGEST_SINCE_S // 3600} h)")
    return kept_lines, kept_since, notes


def _selected(target: Target) -> dict[str, str]:
    return {"label_selector": target.selector_text} if target.selector else {}


def _unread(listed: Any) -> int:
    """How many more the API holds than one list read (``limit``) returned: its
    ``remainingItemCount``, at least one when it only says there is more."""
    meta = listed.metadata
    if meta is None or not meta.var_continue:
        return 0
    return int(meta.remaining_item_count or 1)


def _selector_words(target: Target) -> str:
    return target.selector_text or "the whole namespace"


def _container_of(pod: V1Pod, asked: str | None, target: Target) -> str:
    """The container to read: the one asked for (it must be the pod's), else the pod's default
    (kubectl's annotation), else the target's, else the first."""
    names = [c.name for c in pod.spec.containers] if pod.spec is not None else []
    if asked is not None:
        if not CONTAINER.match(asked) or asked not in names:
            raise OutOfScope(f"pod {meta_of(pod).name} has no container {asked!r}; it has "
                             f"{', '.join(names)}")
        return asked
    default = (meta_of(pod).annotations or {}).get("kubectl.kubernetes.io/default-container")
    for name in (default, target.container):
        if name in names:
            return str(name)
    if not names:
        raise OutOfScope(f"pod {meta_of(pod).name} has no containers to read")
    return names[0]


def _concerns(involved: V1ObjectReference, ours: set[tuple[str, str]],
              workload: str | None) -> bool:
    """Whether an event is about one of the target's objects: listed now, or named as its
    deployment names its ReplicaSets and pods (those since deleted, say)."""
    kind, name = involved.kind or "", involved.name or ""
    if (kind, name) in ours:
        return True
    if workload is None:
        return False
    if kind == "Deployment":
        return name == workload
    suffix = f"-{_HASH}{{1,10}}" + (f"-{_HASH}{{5}}" if kind == "Pod" else "")
    return kind in ("Pod", "ReplicaSet") and re.fullmatch(re.escape(workload) + suffix,
                                                          name) is not None


def _status_message(exc: ApiException) -> str:
    """The ``message`` of the ``Status`` the API answered, else its reason."""
    try:
        body = json.loads(exc.body) if exc.body else None
    except (TypeError, ValueError):
        body = None
    said = body.get("message") if isinstance(body, dict) else None
    return cut(str(said or exc.reason or "no reason given"), 300)


def _reason(exc: urllib3.exceptions.HTTPError) -> str:
    inner = getattr(exc, "reason", None)
    return cut(str(inner or exc), 200)

