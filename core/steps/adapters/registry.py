"""Every step adapter, built once from settings: the executor looks an action up here."""

from __future__ import annotations

from core.mcp.remote import load_servers
from core.outbound.allowlists import ExecutableAllowList, UrlAllowList
from core.settings import Settings
from core.steps.adapters.base import Adapter
from core.steps.adapters.gateway_flip import GatewayFlipAdapter
from core.steps.adapters.http import HttpRequestAdapter
from core.steps.adapters.k8s import K8sRolloutAdapter, RolloutReads
from core.steps.adapters.k8s_objects import (
    ApiObjects,
    FlagSetAdapter,
    K8sConfigMapAdapter,
    K8sScaleAdapter,
    KubeObjects,
)
from core.steps.adapters.mcp_call import McpCallAdapter
from core.steps.adapters.noop import NoopAdapter
from core.steps.adapters.script import ScriptAdapter


def rollout_reads(settings: Settings) -> RolloutReads | None:
    """The cluster a rollout's dry run reads: the investigator's (``OPSGATE_KUBECONFIG``), one
    reader per process; None when none is configured."""
    if not settings.kubeconfig:
        return None
    from core.investigate.sources import kubernetes_reader  # the official client: only when set

    return kubernetes_reader(settings.kubeconfig, settings.kube_context)


def kube_objects(settings: Settings) -> KubeObjects | None:
    """The cluster ``k8s.scale``, ``k8s.configmap`` and ``flag.set`` patch: the one
    ``OPSGATE_KUBECONFIG`` names (its credentials need patch on those objects); None without."""
    reads = rollout_reads(settings)
    api = getattr(reads, "api", None)
    return ApiObjects(api) if api is not None else None


def adapters_from_settings(settings: Settings) -> dict[str, Adapter]:
    """Action name → adapter; allow-lists are resolved here, once, at start."""
    limit = settings.step_output_limit
    built: list[KubeObjects | None] = []

    def objects() -> KubeObjects | None:  # read from the kubeconfig on the first step only
        if not built:
            built.append(kube_objects(settings))
        return built[0]

    adapters: list[Adapter] = [
        NoopAdapter(),
        ScriptAdapter(ExecutableAllowList(settings.script_allowlist), limit,
                      env_allow=tuple(settings.script_env_allow)),
        HttpRequestAdapter(UrlAllowList(settings.http_allowlist), limit),
        K8sRolloutAdapter(settings.kubectl, limit, reads=rollout_reads(settings)),
        K8sScaleAdapter(objects),
        K8sConfigMapAdapter(objects),
        FlagSetAdapter(objects),
        GatewayFlipAdapter(settings.traffic_gateway_url, limit),
        McpCallAdapter(load_servers(settings.mcp_servers) if settings.mcp_servers else {},
                       limit),
    ]
    return {adapter.action: adapter for adapter in adapters}
