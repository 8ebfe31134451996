"""What a training step produced, as Airflow assets and lineage publish it (pure).

:func:`asset_extra` joins the job's :class:`JobFacts` with the W&B run into the ``extra`` of
the operator's asset events. Downstream DAGs read it (docs/assets.md), so its keys are a
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
    """A Volcano job reduced to what its consumers want to know: per Volcano task, in template
    order, its first image, replicas and processes (replicas times ``PET_NPROC_PER_NODE``)."""

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
        """Read the facts from a job as a plain dict; a bare ``{"metadata": {...}}`` (a job
        already gone) gives its identity alone."""
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
    """The JSON-safe ``extra`` of the asset event a successful training step emits.
    ``wandb_summary`` holds only the metrics asked for (``{}`` when none were or W&B could not be
    read: a consumer sees a metric missing rather than made up); ``run`` as the operator returns
    it, with the resume's keys when it resumed; ``gpu_seconds`` and ``throughput`` ``{}`` when
    unknown."""
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
