"""The settings of the investigator's read tools (docs/agent.md "The investigator's tools"):
where Alertmanager and the Kubernetes API are, what a case without catalog components may read,
the token of the change intake, and how much of the model's context tool answers may take."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, SecretStr

from core.catalog.descriptors import label_pairs
from core.settings.forms import HttpUrl
from core.settings_errors import Expect


def _labels(value: str) -> str:
    if label_pairs(value) is None:
        raise ValueError("not key=value labels separated by commas")
    return value


LabelPairs = Annotated[str, AfterValidator(_labels),
                       Expect("key=value labels separated by commas, such as "
                              "app=checkout,tier=web")]


class InvestigationSettings(BaseModel):
    """What the agent's read tools reach and how much they may answer."""

    alertmanager_url: HttpUrl | None = Field(
        default=None, description="Alertmanager base URL (API v2) for the list_alerts tool. "
        "Unset: the tool answers that no alert source is configured.",
    )
    kubeconfig: str | None = Field(
        default=None, description="A kubeconfig file for the Kubernetes read tools (pods, "
        "deployments, events, logs, rollout history), or `in-cluster` for the pod's own service "
        "account. Unset: no Kubernetes source (the tools say so), even inside a cluster.",
    )
    kube_context: str | None = Field(
        default=None, description="The kubeconfig context to use. Unset: its current-context.",
    )
    default_namespace: Annotated[str, Expect("a Kubernetes namespace name such as prod")] | None \
        = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63,
                description="What a case that names no catalog component may read in "
                "Kubernetes: this namespace (with OPSGATE_DEFAULT_SELECTOR). Unset: such a case "
                "reads nothing from Kubernetes until it names a component.")
    default_selector: LabelPairs | None = Field(
        default=None, description="The label selector of OPSGATE_DEFAULT_NAMESPACE's reads "
        "(app=checkout). Unset: the whole namespace.",
    )
    default_metric_labels: LabelPairs | None = Field(
        default=None, description="The labels every metric and alert read for a case without "
        "components must carry (service=checkout). Unset: such a case reads no metrics or "
        "alerts until it names a component.",
    )
    changes_token: SecretStr | None = Field(
        default=None, description="The bearer token POST /changes requires (deploy and "
        "configuration changes from CI, Argo CD or GitHub). Unset: the intake refuses every "
        "change (401).",
    )
    tool_result_tokens: int = Field(
        default=1500, ge=100, le=20_000,
        description="The most one read tool's answer may hold, in tokens (about 4 characters "
        "each); longer is cut, with a note of what was cut.",
    )
    tool_context_share: float = Field(
        default=0.5, gt=0, le=0.9,
        description="The share of the model's context window all tool answers of one planning "
        "turn may take together; past it, a read answers that the budget is spent.",
    )
    model_context_tokens: int = Field(
        default=32_000, ge=2_000, le=2_000_000,
        description="The model's context window in tokens (for OPSGATE_TOOL_CONTEXT_SHARE).",
    )
