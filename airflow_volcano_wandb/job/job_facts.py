"""What a training step produced, as Airflow assets and lineage publish it.

Pure. :class:`JobFacts` is read from the Volcano job the task ran (its identity, images and
replica counts); :func:`asset_extra` joins it with the W&B run into the ``extra`` of the asset
event the operator emits for each of its ``outlets``. Downstream DAGs scheduled on that asset
read the extra from ``triggering_asset_events`` (see docs/assets.md), so the keys here are a
public contract: add to them, never rename.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_volcano_wandb.job import gpu_usage
from airflow_volcano_wandb.job.job_view import JobView
from airflow_volcano_wandb.template import master_task_name
from airflow_volcano_wandb.template.torchrun import processes_per_pod


@dataclass(frozen=True)
class JobFacts:
    """A Volcano job reduced to what its consumers want to know.

    :param uid: the job's uid (empty when unknown).
    :param images: the first container's image per Volcano task, in template order.
    :param replicas: replicas per Volcano task, in template order.
    :param master_task: the task that runs rank 0 (the ``pytorch`` plugin's master), if known.
    :param processes: processes per Volcano task: its replicas times the processes each pod
        starts (``PET_NPROC_PER_NODE``, one per GPU under ``torchrun``; else one per pod).
    """

    name: str
    namespace: str
    uid: str = ""
    images: Mapping[str, str] = field(default_factory=dict)
    replicas: Mapping[str, int] = field(default_factory=dict)
    master_task: str | None = None
    processes: Mapping[str, int] = field(default_factory=dict)
    #: An elastic job's range and re-formations (``gpu_usage.elastic_report``); ``{}``: not
    #: elastic.
    elastic: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_job(cls, job: Mapping[str, Any]) -> JobFacts:
        """Read the facts from a job as the Kubernetes API returns it (or as rendered).

        :param job: the ``batch.volcano.sh/v1alpha1`` Job as a plain dict; a bare
            ``{"metadata": {...}}`` (a job already gone) gives its identity alone.
        """
        view = JobView.of(job)
        images: dict[str, str] = {}
        processes: dict[str, int] = {}
        for task in view.tasks:
            containers = task.containers
            per_pod = processes_per_pod(containers[0]) if containers else 1
            processes[task.name] = view.replicas.get(task.name, 0) * per_pod
            if containers and containers[0].get("image"):
                images[task.name] = str(containers[0]["image"])
        return cls(
            name=view.name,
            namespace=view.namespace,
            uid=view.uid,
            images=images,
            replicas=view.replicas,
            master_task=master_task_name(job),
            processes=processes,
            elastic=gpu_usage.elastic_report(job, None),
        )

    @property
    def image(self) -> str | None:
        """The training image: the master task's, else the first task's."""
        if self.master_task and self.master_task in self.images:
            return self.images[self.master_task]
        return next(iter(self.images.values()), None)

    @property
    def world_size(self) -> int:
        """Processes in the job, as ``torch.distributed`` counts its world: with 8 GPUs per
        pod under ``torchrun`` that is pods times 8."""
        return sum(self.processes.values())


def asset_extra(
    facts: JobFacts,
    run: Mapping[str, Any],
    summary: Mapping[str, Any] | None,
    gpu_seconds: Mapping[str, float] | None = None,
    throughput: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The ``extra`` of the asset event a successful training step emits.

    JSON-safe by construction (Airflow stores it in its metadata DB). ``wandb_summary`` holds
    only the metrics the operator was asked for (``wandb_summary_keys``), and is ``{}`` when
    none were asked for or W&B could not be read: a consumer gating on a metric sees it missing
    rather than a made-up value.

    :param facts: the job the step ran.
    :param run: the W&B run as the operator returns it: ``wandb_run_id``, ``wandb_run_url``,
        and ``resumed_from_intent`` (and ``resumed_from_step``, ``resume_saved_gpu_seconds``)
        when the step resumed an interrupted try's run.
    :param summary: the requested W&B summary metrics.
    :param gpu_seconds: GPU-seconds per rank (``gpu_usage``); ``{}`` when unknown.
    :param throughput: the run's steps per second and seconds per epoch, from its summary
        (``wait.training_progress.throughput``); ``{}`` when unknown.
    """
    return {
        "wandb_run_id": run.get("wandb_run_id"),
        "wandb_run_url": run.get("wandb_run_url"),
        "wandb_summary": dict(summary or {}),
        "volcano_job": facts.name,
        "volcano_job_uid": facts.uid,
        "volcano_namespace": facts.namespace,
        "image": facts.image,
        "images": dict(facts.images),
        "replicas": dict(facts.replicas),
        "world_size": facts.world_size,
        "gpu_seconds": dict(gpu_seconds or {}),
        # An elastic job's range, re-formations and GPU-hours; {} for a job that is not.
        "elastic": gpu_usage.elastic_report_of(facts.elastic, gpu_seconds),
        "throughput": dict(throughput or {}),
        # The intent of an interrupted try whose W&B run this step resumed (``job.resume``).
        "resumed_from_intent": run.get("resumed_from_intent"),
        # The step its trainer said it continued after (docs/trainer.md, "Checkpoints").
        "resumed_from_step": run.get("resumed_from_step"),
        # The GPU-seconds that saved: the checkpoint's seconds of training times the job's GPUs.
        "resume_saved_gpu_seconds": run.get("resume_saved_gpu_seconds"),
    }
