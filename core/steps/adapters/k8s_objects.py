"""``k8s.scale``, ``k8s.configmap`` and ``flag.set``: the three remedies that set one object back
through the official Kubernetes client — a Deployment's replicas (its scale subresource), a
ConfigMap's data, one flag of an OpenFeature ``FeatureFlag`` (``core.openfeature.dev``). Each is
a JSON merge patch computed from what the object holds now; the dry run sends the same patch with
``dryRun=All`` and says the difference in words ("ConfigMap ledger/ledger-config: payout.timeout
3s → 3000ms"); a patch that would change nothing is refused before anyone approves it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from core.steps.adapters.base import (
    Checked,
    NothingToChange,
    StepContext,
    StepOutcome,
    StepRefused,
    parse_params,
)
from core.steps.adapters.k8s import NO_CLUSTER, Deployment, Namespace
from core.steps.words import Sentence, Value, json_words, refused, validated

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

FLAGS = ("core.openfeature.dev", "v1beta1", "featureflags")  # group, version, plural
MERGE = "application/merge-patch+json"
REQUEST_TIMEOUT_S = 10.0
Key = Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z0-9]{1,253}$")]
Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9](?:[-.a-z0-9]*[a-z0-9])?$",
                                        max_length=253)]


class ScaleParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    namespace: Namespace
    deployment: Deployment
    replicas: int = Field(ge=0, le=1000)


class ConfigMapParams(BaseModel):
    """The ConfigMap's whole ``data`` as it should be (keys not named are removed)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    namespace: Namespace
    name: Name
    data: dict[Key, Annotated[str, StringConstraints(max_length=65536)]]


class FlagParams(BaseModel):
    """The fields of one flag of a ``FeatureFlag`` to set (``defaultVariant``, ``state``,
    ``targeting``…); fields not named keep their value."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    namespace: Namespace
    name: Name
    flag: Key
    value: dict[Key, Any] = Field(min_length=1)


def describe_scale(params: Mapping[str, Any]) -> Sentence:
    """"Scale deployment shop/checkout to 8 replicas"."""
    p = validated(ScaleParams, params)
    if not isinstance(p, ScaleParams):
        return refused("k8s.scale", p)
    return ("Scale deployment ", Value(f"{p.namespace}/{p.deployment}"),
            f" to {p.replicas} replicas")


def describe_configmap(params: Mapping[str, Any]) -> Sentence:
    """"Set the data of ConfigMap ledger/ledger-config back to {payout.timeout: "3000ms"}"."""
    p = validated(ConfigMapParams, params)
    if not isinstance(p, ConfigMapParams):
        return refused("k8s.configmap", p)
    return ("Set the data of ConfigMap ", Value(f"{p.namespace}/{p.name}"), " back to ",
            Value(json_words(p.data)))


def describe_flag(params: Mapping[str, Any]) -> Sentence:
    """"Set flag new-payout of FeatureFlag ledger/ledger-flags back to {defaultVariant: …}"."""
    p = validated(FlagParams, params)
    if not isinstance(p, FlagParams):
        return refused("flag.set", p)
    return ("Set flag ", Value(p.flag), " of FeatureFlag ", Value(f"{p.namespace}/{p.name}"),
            " back to ", Value(json_words(p.value)))


def diff_words(what: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """``what``'s difference in words: "ConfigMap ledger/c: payout.timeout 3s → 3000ms"; ""
    when there is none."""
    changed = []
    for key in sorted({*before, *after}):
        if key not in after:
            changed.append(f"{key} {json_words(before[key])} removed")
        elif key not in before:
            changed.append(f"{key} added as {json_words(after[key])}")
        elif before[key] != after[key]:
            changed.append(f"{key} {_plain(before[key])} → {_plain(after[key])}")
    return f"{what}: {', '.join(changed)}" if changed else ""


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json_words(value)


def merge_patch(now: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that makes ``now`` exactly ``wanted`` (removed keys are null)."""
    return {**{key: None for key in now if key not in wanted}, **wanted}


class KubeObjects(Protocol):
    """What the three adapters read and patch (``ApiObjects`` with the official client)."""

    host: str

    def scale(self, namespace: str, name: str, replicas: int | None,
              dry_run: bool) -> int: ...

    def configmap(self, namespace: str, name: str, patch: Mapping[str, Any] | None,
                  dry_run: bool) -> dict[str, str]: ...

    def flags(self, namespace: str, name: str, patch: Mapping[str, Any] | None,
              dry_run: bool) -> dict[str, Any]: ...


class ApiObjects:
    """``KubeObjects`` through one ``ApiClient`` (a read when the patch is None; a patch sent
    with ``dryRun=All`` when ``dry_run``)."""

    def __init__(self, api: ApiClient, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        from kubernetes.client import AppsV1Api, CoreV1Api, CustomObjectsApi

        self.host = str(api.configuration.host)
        self._apps, self._core = AppsV1Api(api), CoreV1Api(api)
        self._custom = CustomObjectsApi(api)
        self._timeout_s = timeout_s

    def _call(self, what: str, call: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return call(*args, **kw, _request_timeout=self._timeout_s)
        except ApiException as exc:
            raise StepRefused(f"the Kubernetes API at {self.host} answered {exc.status} "
                              f"{exc.reason} when asked to {what}") from exc

    def _write(self, dry_run: bool) -> dict[str, Any]:
        return {"dry_run": "All", "_content_type": MERGE} if dry_run else {"_content_type": MERGE}

    def scale(self, namespace: str, name: str, replicas: int | None, dry_run: bool) -> int:
        what = f"scale deployment {namespace}/{name}"
        if replicas is None:
            found = self._call(what, self._apps.read_namespaced_deployment_scale, name, namespace)
        else:
            found = self._call(what, self._apps.patch_namespaced_deployment_scale, name,
                               namespace, {"spec": {"replicas": replicas}},
                               **self._write(dry_run))
        return int(found.spec.replicas or 0)

    def configmap(self, namespace: str, name: str, patch: Mapping[str, Any] | None,
                  dry_run: bool) -> dict[str, str]:
        what = f"set ConfigMap {namespace}/{name}"
        if patch is None:
            found = self._call(what, self._core.read_namespaced_config_map, name, namespace)
        else:
            found = self._call(what, self._core.patch_namespaced_config_map, name, namespace,
                               {"data": dict(patch)}, **self._write(dry_run))
        return dict(found.data or {})

    def flags(self, namespace: str, name: str, patch: Mapping[str, Any] | None,
              dry_run: bool) -> dict[str, Any]:
        what = f"set FeatureFlag {namespace}/{name}"
        group, version, plural = FLAGS
        if patch is None:
            found = self._call(what, self._custom.get_namespaced_custom_object, group, version,
                               namespace, plural, name)
        else:
            found = self._call(what, self._custom.patch_namespaced_custom_object, group, version,
                               namespace, plural, name,
                               {"spec": {"flagSpec": {"flags": dict(patch)}}},
                               **self._write(dry_run))
        flags = ((found or {}).get("spec") or {}).get("flagSpec", {}).get("flags")
        return dict(flags) if isinstance(flags, Mapping) else {}


Objects = Callable[[], "KubeObjects | None"]


class _ObjectAdapter:
    action = ""

    def __init__(self, objects: Objects) -> None:
        self._objects = objects

    def _cluster(self) -> KubeObjects:
        found = self._objects()
        if found is None:
            raise StepRefused(f"{self.action}: {NO_CLUSTER}", action=self.action)
        return found

    def dry_run(self, params: Mapping[str, Any]) -> Checked:
        """The patch sent with ``dryRun=All``: what it would change, in words; refused when it
        would change nothing. Not checked without a cluster."""
        if self._objects() is None:
            parse_params(self._model(), params, self.action)
            return "not_checked", NO_CLUSTER
        words = self._change(params, dry_run=True)
        if not words:
            raise NothingToChange(f"{self.action}: {self._what(params)} already is what the "
                                  "step would set: it would change nothing", action=self.action)
        return "ok", f"would change {words}"

    def run(self, params: Mapping[str, Any], ctx: StepContext) -> StepOutcome:
        try:
            words = self._change(params, dry_run=False)
        except StepRefused as failed:
            if failed.message.startswith(f"{self.action}: invalid params"):
                raise
            return StepOutcome(ok=False, summary=f"{self.action}: {failed.message}")
        return StepOutcome(ok=True, summary=f"{self.action}: changed {words}" if words else
                           f"{self.action}: {self._what(params)} already was as set",
                           detail={"changed": words})

    def _model(self) -> type[BaseModel]:
        raise NotImplementedError

    def _what(self, params: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def _change(self, params: Mapping[str, Any], *, dry_run: bool) -> str:
        raise NotImplementedError


class K8sScaleAdapter(_ObjectAdapter):
    action = "k8s.scale"

    def _model(self) -> type[BaseModel]:
        return ScaleParams

    def _what(self, params: Mapping[str, Any]) -> str:
        return f"deployment {params.get('namespace')}/{params.get('deployment')}"

    def _change(self, params: Mapping[str, Any], *, dry_run: bool) -> str:
        p = parse_params(ScaleParams, params, self.action)
        cluster = self._cluster()
        now = cluster.scale(p.namespace, p.deployment, None, dry_run)
        then = cluster.scale(p.namespace, p.deployment, p.replicas, dry_run)
        return diff_words(f"Deployment {p.namespace}/{p.deployment}", {"replicas": now},
                          {"replicas": then})


class K8sConfigMapAdapter(_ObjectAdapter):
    action = "k8s.configmap"

    def _model(self) -> type[BaseModel]:
        return ConfigMapParams

    def _what(self, params: Mapping[str, Any]) -> str:
        return f"ConfigMap {params.get('namespace')}/{params.get('name')}"

    def _change(self, params: Mapping[str, Any], *, dry_run: bool) -> str:
        p = parse_params(ConfigMapParams, params, self.action)
        cluster = self._cluster()
        now = cluster.configmap(p.namespace, p.name, None, dry_run)
        if now == p.data:
            return ""
        then = cluster.configmap(p.namespace, p.name, merge_patch(now, p.data), dry_run)
        return diff_words(f"ConfigMap {p.namespace}/{p.name}", now, then)


class FlagSetAdapter(_ObjectAdapter):
    action = "flag.set"

    def _model(self) -> type[BaseModel]:
        return FlagParams

    def _what(self, params: Mapping[str, Any]) -> str:
        return f"flag {params.get('flag')} of FeatureFlag {params.get('namespace')}/" \
               f"{params.get('name')}"

    def _change(self, params: Mapping[str, Any], *, dry_run: bool) -> str:
        p = parse_params(FlagParams, params, self.action)
        cluster = self._cluster()
        now = cluster.flags(p.namespace, p.name, None, dry_run)
        if p.flag not in now:
            raise StepRefused(f"{self.action}: FeatureFlag {p.namespace}/{p.name} has no flag "
                              f"{p.flag} (it has {', '.join(sorted(now)) or 'none'})",
                              action=self.action)
        old = dict(now[p.flag]) if isinstance(now[p.flag], Mapping) else {}
        if {**old, **p.value} == old:
            return ""
        then = cluster.flags(p.namespace, p.name, {p.flag: p.value}, dry_run)
        new = then.get(p.flag)
        return diff_words(f"flag {p.flag} of FeatureFlag {p.namespace}/{p.name}", old,
                          dict(new) if isinstance(new, Mapping) else {})
