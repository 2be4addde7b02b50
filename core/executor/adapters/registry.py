"""Every step adapter, built once from settings: the executor looks an action up here."""

from __future__ import annotations

from core.executor.adapters.base import Adapter
from core.executor.adapters.gateway_flip import GatewayFlipAdapter
from core.executor.adapters.http import HttpRequestAdapter
from core.executor.adapters.k8s import K8sRolloutAdapter
from core.executor.adapters.mcp_call import McpCallAdapter
from core.executor.adapters.noop import NoopAdapter
from core.executor.adapters.script import ScriptAdapter
from core.executor.allowlists import ExecutableAllowList, UrlAllowList
from core.mcp.remote import load_servers
from core.settings import Settings


def adapters_from_settings(settings: Settings) -> dict[str, Adapter]:
    """Action name → adapter; allow-lists are resolved here, once, at start."""
    limit = settings.step_output_limit
    adapters: list[Adapter] = [
        NoopAdapter(),
        ScriptAdapter(ExecutableAllowList(settings.script_allowlist), limit,
                      env_allow=tuple(settings.script_env_allow)),
        HttpRequestAdapter(UrlAllowList(settings.http_allowlist), limit),
        K8sRolloutAdapter(settings.kubectl, limit),
        GatewayFlipAdapter(settings.traffic_gateway_url, limit),
        McpCallAdapter(load_servers(settings.mcp_servers) if settings.mcp_servers else {},
                       limit),
    ]
    return {adapter.action: adapter for adapter in adapters}
