"""``k8s.rollout``: restart, undo or set-image on one Deployment through ``kubectl``, then wait
for ``rollout status``. The argv is built from validated params only; every value is matched
against Kubernetes' own name rules, so none can be read as a flag."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from core.errors import Unavailable
from core.outbound.allowlists import resolve_executable
from core.steps.adapters.base import (
    Checked,
    NothingToChange,
    StepContext,
    StepOutcome,
    StepRefused,
    parse_params,
)
from core.steps.adapters.process_step import (
    command_line,
    process_detail,
    process_summary,
    start_failure,
    succeeded,
)
from core.steps.capture import truncate
from core.steps.process import BASE_ENV, ProcessResult, minimal_env, run_process
from core.steps.words import Sentence, Value, refused, sentence, validated

if TYPE_CHECKING:
    from core.investigate.kubernetes import RolloutState

# kubectl's own configuration, not the plan's: where the cluster is and who we are.
KUBECTL_ENV = (*BASE_ENV, "HOME", "KUBECONFIG", "KUBERNETES_SERVICE_HOST",
               "KUBERNETES_SERVICE_PORT")

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = (
    rf"^(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?"  # registry[:port]/
    rf"{_PATH_PART}(?:/{_PATH_PART})*"  # repository path
    r"(?::[\w][\w.-]{0,127})?"  # :tag
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"  # @digest
)
Namespace = Annotated[str, StringConstraints(pattern=rf"^{_LABEL}$", max_length=63)]
Container = Annotated[str, StringConstraints(pattern=rf"^{_LABEL}$", max_length=63)]
Deployment = Annotated[str, StringConstraints(pattern=rf"^{_LABEL}(?:\.{_LABEL})*$",
                                              max_length=253)]
Image = Annotated[str, StringConstraints(pattern=_IMAGE, max_length=512)]


class RolloutParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    operation: Literal["restart", "undo", "set-image"]
    deployment: Deployment
    namespace: Namespace
    container: Container | None = None
    image: Image | None = None
    to_revision: int | None = Field(default=None, ge=1, le=2_147_483_647)

    @model_validator(mode="after")
    def _fits_operation(self) -> RolloutParams:
        wants_image = self.operation == "set-image"
        if wants_image and (self.container is None or self.image is None):
            raise ValueError("set-image needs container and image")
        if not wants_image and (self.container is not None or self.image is not None):
            raise ValueError(f"{self.operation} takes no container or image")
        if self.to_revision is not None and self.operation != "undo":
            raise ValueError("to_revision belongs to undo only")
        return self


def describe(params: Mapping[str, Any]) -> Sentence:
    """The step in words: "Restart deployment shop/checkout", "Roll deployment shop/checkout
    back to its previous revision", "Set the image of deployment … (container api) to …"."""
    p = validated(RolloutParams, params)
    if not isinstance(p, RolloutParams):
        return refused("k8s.rollout", p)
    target = Value(f"{p.namespace}/{p.deployment}")
    if p.operation == "restart":
        return ("Restart deployment ", target)
    if p.operation == "undo":
        to = "its previous revision" if p.to_revision is None else f"revision {p.to_revision}"
        return ("Roll deployment ", target, f" back to {to}")
    return sentence("Set the image of deployment ", target, " (container ",
                    Value(str(p.container)), ") to ", Value(str(p.image)))


def _rollout_change(p: RolloutParams, where: str, state: RolloutState) -> str:
    """What the rollout would change in ``state``, in words; ``StepRefused`` when the container
    or revision it names is not there."""
    now = f"revision {state.revision}" if state.revision is not None else "its current revision"
    if p.operation == "restart":
        images = ", ".join(f"{c}={i}" for c, i in sorted(state.images.items()))
        return f"would restart {where} ({now}: {images}), images unchanged"
    if p.operation == "set-image":
        assert p.container is not None, "set-image names its container"
        if p.container not in state.images:
            raise StepRefused(f"{where} has no container {p.container} (it has "
                              f"{', '.join(sorted(state.images)) or 'none'})", action="k8s.rollout")
        if state.images[p.container] == p.image:
            raise NothingToChange(f"container {p.container} of {where} already runs {p.image}: "
                                  "the step would change nothing", action="k8s.rollout")
        return (f"would set container {p.container} of {where}: {state.images[p.container]} → "
                f"{p.image}")
    earlier = sorted(r for r in state.revisions if state.revision is None or r < state.revision)
    target = p.to_revision if p.to_revision is not None else (earlier[-1] if earlier else None)
    held = ", ".join(map(str, sorted(state.revisions))) or "none"
    if target is None or target not in state.revisions:
        wanted = f"revision {p.to_revision}" if p.to_revision else "an earlier revision"
        raise StepRefused(f"{where} has no {wanted} to undo to (its revisions: {held})",
                          action="k8s.rollout")
    images = ", ".join(f"{c}={i}" for c, i in sorted(state.revisions[target].items()))
    if state.revisions[target] == state.images:
        raise NothingToChange(f"revision {target} of {where} runs the images it runs now "
                              f"({images}): undoing to it would change nothing",
                              action="k8s.rollout")
    return f"would undo {where} from {now} to revision {target} ({images})"


def change_argv(kubectl: str, p: RolloutParams) -> list[str]:
    """The kubectl command that makes the change."""
    target = f"deployment/{p.deployment}"
    if p.operation == "restart":
        return [kubectl, "-n", p.namespace, "rollout", "restart", target]
    if p.operation == "undo":
        revision = [] if p.to_revision is None else [f"--to-revision={p.to_revision}"]
        return [kubectl, "-n", p.namespace, "rollout", "undo", target, *revision]
    return [kubectl, "-n", p.namespace, "set", "image", target, f"{p.container}={p.image}"]


def status_argv(kubectl: str, p: RolloutParams, timeout_s: int) -> list[str]:
    """The kubectl command that waits for the rollout to finish."""
    return [kubectl, "-n", p.namespace, "rollout", "status", f"deployment/{p.deployment}",
            f"--timeout={timeout_s}s"]


class RolloutReads(Protocol):
    """What a dry run reads of a cluster (``core.investigate.kubernetes.KubernetesReader``)."""

    host: str

    def rollout_state(self, namespace: str, name: str) -> RolloutState | None: ...


NO_CLUSTER = "no Kubernetes API is configured to read it from (OPSGATE_KUBECONFIG)"


class K8sRolloutAdapter:
    action = "k8s.rollout"

    def __init__(self, kubectl: str, output_limit: int, grace_s: float = 2.0,
                 reads: RolloutReads | None = None) -> None:
        self._kubectl_setting = kubectl
        self._kubectl = resolve_executable(kubectl)
        self._output_limit = output_limit
        self._grace_s = grace_s
        self._reads = reads

    def dry_run(self, params: Mapping[str, Any]) -> Checked:
        """What the rollout would change, read (GETs only) from the cluster: the deployment,
        the container and today's image → the new one, the revision to undo to. Not checked
        when no cluster is configured or it cannot be read; refused when what the step names
        is not there."""
        p = parse_params(RolloutParams, params, self.action)
        where = f"deployment {p.namespace}/{p.deployment}"
        if self._reads is None:
            return "not_checked", NO_CLUSTER
        try:
            state = self._reads.rollout_state(p.namespace, p.deployment)
        except Unavailable as down:
            return "not_checked", down.message
        if state is None:
            raise StepRefused(f"{where} does not exist in the cluster at {self._reads.host}",
                              action=self.action)
        return "ok", _rollout_change(p, where, state)

    def run(self, params: Mapping[str, Any], ctx: StepContext) -> StepOutcome:
        parsed = parse_params(RolloutParams, params, self.action)
        kubectl = self._kubectl
        if kubectl is None:
            raise StepRefused(f"{self.action}: kubectl not found: {self._kubectl_setting!r} "
                              "(OPSGATE_KUBECTL)", action=self.action)
        deadline = time.monotonic() + ctx.timeout_s
        try:
            results = [self._run(change_argv(kubectl, parsed), deadline)]
            if succeeded(results[0]):
                left = max(1, int(deadline - time.monotonic()))
                results.append(self._run(status_argv(kubectl, parsed, left), deadline))
        except OSError as exc:
            return start_failure([kubectl], self._label(parsed), exc)
        return self._outcome(parsed, results)

    def _run(self, argv: Sequence[str], deadline: float) -> ProcessResult:
        return run_process(argv, timeout_s=max(0.0, deadline - time.monotonic()),
                           env=minimal_env(passthrough=KUBECTL_ENV),
                           output_limit=self._output_limit, grace_s=self._grace_s)

    def _label(self, p: RolloutParams) -> str:
        return f"{self.action} {p.operation} {p.namespace}/{p.deployment}"

    def _outcome(self, p: RolloutParams, results: list[ProcessResult]) -> StepOutcome:
        last = results[-1]
        ok = len(results) == 2 and succeeded(last)
        transcript = "\n".join(
            f"$ {command_line([os.path.basename(r.argv[0]), *r.argv[1:]])}\n{r.output}"
            for r in results)
        return StepOutcome(
            ok=ok, summary=process_summary(last, self._label(p)),
            output=truncate(transcript, self._output_limit),
            detail={"commands": [process_detail(r) for r in results],
                    "duration_s": round(sum(r.duration_s for r in results), 3)},
        )
