"""OpenLineage for the training step: the Volcano job, its W&B run, datasets in and model out.

The operator's ``get_openlineage_facets_on_complete``/``_on_failure`` return
:func:`operator_lineage`. The OpenLineage classes are imported when lineage is asked for, so
the provider does not require ``apache-airflow-providers-openlineage`` (Airflow calls these
methods only when it is installed and enabled). Datasets are the artifacts the W&B run used
and logged (best-effort), in namespace ``wandb://<server host>``, named
``<entity>/<project>/<artifact>:v<version>``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import urlparse

from airflow_volcano_wandb.job.job_facts import JobFacts
from airflow_volcano_wandb.wandb.wandb_run import ArtifactRef

DEFAULT_WANDB_HOST = "api.wandb.ai"


class ArtifactReader(Protocol):
    """What :func:`operator_lineage` needs of the W&B hook."""

    def run_artifacts(
        self, run_id: str, *, entity: str | None, project: str | None
    ) -> tuple[list[ArtifactRef], list[ArtifactRef]]: ...


@functools.cache
def _facets() -> tuple[type, type, type]:
    """The provider's facet classes, defined on first use (OpenLineage may not be installed)."""
    from attrs import define
    from openlineage.client.facet_v2 import JobFacet, RunFacet

    @define
    class VolcanoJobFacet(JobFacet):
        """The Volcano job a training step runs: where, what image, how many ranks."""

        namespace: str
        image: str | None
        images: dict[str, str]
        replicas: dict[str, int]
        worldSize: int

    @define
    class VolcanoJobRunFacet(RunFacet):
        """The Volcano job of this run."""

        name: str
        namespace: str
        uid: str

    @define
    class WandbRunFacet(RunFacet):
        """The W&B run this Airflow task trained into."""

        runId: str | None
        url: str | None
        entity: str | None
        project: str | None
        summary: dict[str, Any]

    return VolcanoJobFacet, VolcanoJobRunFacet, WandbRunFacet


def wandb_namespace(base_url: str | None) -> str:
    """The OpenLineage namespace of a W&B server's artifacts (``base_url``: the W&B API
    address; ``None`` for W&B's cloud)."""
    host = urlparse(base_url).netloc if base_url else DEFAULT_WANDB_HOST
    return f"wandb://{host or DEFAULT_WANDB_HOST}"


def operator_lineage(
    facts: JobFacts,
    run: Mapping[str, Any],
    *,
    summary: Mapping[str, Any] | None,
    entity: str | None,
    project: str | None,
    base_url: str | None,
    artifacts: tuple[Sequence[ArtifactRef], Sequence[ArtifactRef]] = ((), ()),
) -> Any:
    """The ``OperatorLineage`` of a training step: ``facts``, the job it ran; ``run``, its
    ``wandb_run_id`` and ``wandb_run_url``; ``summary``, the requested W&B summary metrics, if
    read; ``base_url``, the W&B API address (``None``: the cloud), naming the datasets'
    namespace; ``artifacts``, the run's used and logged artifacts."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    job_facet, job_run_facet, wandb_facet = _facets()
    namespace = wandb_namespace(base_url)
    used, logged = artifacts
    return OperatorLineage(
        inputs=[Dataset(namespace=namespace, name=a.qualified_name) for a in used],
        outputs=[Dataset(namespace=namespace, name=a.qualified_name) for a in logged],
        job_facets={
            "volcano_job": job_facet(
                namespace=facts.namespace,
                image=facts.image,
                images=dict(facts.images),
                replicas=dict(facts.replicas),
                worldSize=facts.world_size,
            )
        },
        run_facets={
            "volcano_job_run": job_run_facet(
                name=facts.name, namespace=facts.namespace, uid=facts.uid
            ),
            "wandb_run": wandb_facet(
                runId=run.get("wandb_run_id"),
                url=run.get("wandb_run_url"),
                entity=entity,
                project=project,
                summary=dict(summary or {}),
            ),
        },
    )


def read_artifacts(
    hook: ArtifactReader,
    run_id: str | None,
    *,
    entity: str | None,
    project: str | None,
    mode: str | None,
    has_key: bool,
    log: logging.Logger | Any,
) -> tuple[list[ArtifactRef], list[ArtifactRef]]:
    """The run's used and logged artifacts, read through ``hook`` (``WandbHook``); empty, with
    one line in the task's ``log``, when they cannot be read: the run's ``mode`` is offline or
    disabled (not on a server), the connection has no API key (``has_key``), or W&B fails."""
    if not run_id or mode in ("offline", "disabled") or not has_key:
        log.info("Lineage without W&B artifacts: the W&B run is not readable (mode %s)", mode)
        return [], []
    try:
        return hook.run_artifacts(run_id, entity=entity, project=project)
    except Exception as exc:  # lineage must never fail the task
        log.warning(
            "Lineage without W&B artifacts: could not read run %s (%s: %s)",
            run_id,
            type(exc).__name__,
            exc,
        )
        return [], []
