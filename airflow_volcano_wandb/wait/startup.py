"""The startup budget: how long a placed rank's container may fail to start.

Pure. A gang waiting for GPUs is queueing (``pending_timeout`` bounds that). A placed pod whose
container the kubelet cannot start holds its GPU, as does every started rank of its gang,
while nothing trains. The kubelet says why in the container's ``state.waiting.reason``:

* :data:`NEVER_STARTS`: nothing can change it (a malformed image reference, a pull the pod's
  policy forbids). The wait ends as soon as a pod read shows it.
* :data:`MAY_HEAL`: a registry blip, or a Secret or ConfigMap key created late, can heal: the
  wait ends once the container has failed for ``startup_timeout`` and still does.

A container still being created (a slow pull of a large image) is not failing. The clock starts
at the latest of the pod's placement (``PodScheduled``), the container's last exit and the start
of this try's wait (``not_before``), all read from the pod or the wait's fields: a triggerer
restart does not restart it, and a retry that reattaches to a job whose key Secret it has just
delivered gives the kubelet the whole budget (``KubernetesPodOperator``'s 120 s).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.job.endings import Ending, of_reason
from airflow_volcano_wandb.job.job_view import ObjectMeta, epoch_seconds
from airflow_volcano_wandb.wait.restart_budget import RankContainer, job_pods, rank_of

#: The default ``startup_timeout``, as ``KubernetesPodOperator``'s ``startup_timeout_seconds``.
DEFAULT_STARTUP_TIMEOUT = 120.0

#: Waiting reasons no retry of the kubelet can change: the wait ends at once.
NEVER_STARTS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
#: Waiting reasons that a registry, a pull secret or a late Secret can still heal: the wait
#: ends after ``startup_timeout`` of them.
MAY_HEAL = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError"}
)


@dataclass(frozen=True)
class StartFailure(RankContainer):
    """The container of a placed rank that the kubelet cannot start, in the kubelet's words.

    ``failing_for`` is how long the container has been failing, as far as the clock counts
    (see the module); ``startup_timeout`` the budget it was held to (``None``: it failed for
    a reason that never heals, and the budget was not waited out).
    """

    reason: str
    failing_for: float
    startup_timeout: float | None
    image: str = ""
    message: str = ""

    @property
    def cause(self) -> Ending:
        """``IMAGE_PULL`` when the image cannot be had, else ``CONTAINER_CONFIG``: the
        container's configuration cannot be met."""
        return of_reason(self.reason) or Ending.CONTAINER_CONFIG

    def describe(self) -> str:
        """One sentence for the task log and the exception."""
        text = (
            f"rank {self.rank} (pod {self.pod}) container {self.container} with image "
            f"{self.image or '?'} cannot start: {self.reason}"
        )
        if self.message:
            text += f": {self.message}"
        if self.startup_timeout is None:
            return text + " (the kubelet cannot retry its way out of this)"
        return (
            text + f" (failing for {self.failing_for:.0f}s, past "
            f"startup_timeout={self.startup_timeout:g}s)"
        )


def start_failure(
    pods: Iterable[Mapping[str, Any]],
    startup_timeout: float | None,
    now: float,
    *,
    job_name: str,
    job_uid: str | None = None,
    not_before: float | None = None,
) -> StartFailure | None:
    """The first placed container (by pod, init containers first) of ``job_uid``'s pods
    (``None``: every pod given) that cannot start and has failed for ``startup_timeout`` (a
    :data:`MAY_HEAL` reason) counted from no earlier than ``not_before``, or at all (a
    :data:`NEVER_STARTS` one); ``None`` while none has, and always for ``startup_timeout=None``.
    """
    if startup_timeout is None:
        return None
    for pod in sorted(job_pods(pods, job_uid), key=lambda p: ObjectMeta.of(p).name):
        placed_at = _scheduled_at(pod)
        if placed_at is None:
            continue
        for container in _containers(pod):
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = str(waiting.get("reason") or "")
            if reason not in NEVER_STARTS and reason not in MAY_HEAL:
                continue
            since = max(placed_at, _last_exit(container) or placed_at, not_before or placed_at)
            failing_for = max(0.0, now - since)
            if reason in MAY_HEAL and failing_for < startup_timeout:
                continue
            name = ObjectMeta.of(pod).name
            return StartFailure(
                pod=name,
                rank=rank_of(name, job_name),
                container=str(container.get("name") or ""),
                image=_image(pod, container),
                reason=reason,
                message=str(waiting.get("message") or "").strip(),
                failing_for=failing_for,
                startup_timeout=startup_timeout if reason in MAY_HEAL else None,
            )
    return None


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _scheduled_at(pod: Mapping[str, Any]) -> float | None:
    """When the pod was placed on its node; ``None`` while it is not (it is queueing)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return epoch_seconds(condition.get("lastTransitionTime")) or epoch_seconds(
                ObjectMeta.of(pod).creation_timestamp
            )
    return None


def _last_exit(container: Mapping[str, Any]) -> float | None:
    """When the container last ended: a restart that cannot start again counts from there."""
    terminated = (container.get("lastState") or {}).get("terminated") or {}
    return epoch_seconds(terminated.get("finishedAt"))


def _image(pod: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    """The image the pod's spec asks for (the status may show it rewritten, or not at all)."""
    name = container.get("name")
    spec = pod.get("spec") or {}
    for declared in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if declared.get("name") == name:
            return str(declared.get("image") or "")
    return str(container.get("image") or "")
