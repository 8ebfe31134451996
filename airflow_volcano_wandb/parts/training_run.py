"""Which W&B run the operator's job writes to, and what the task says of it: the run's
identity and key for the pods, its XComs, its lineage. The run itself is the pure
``wandb/wandb_run.py``, the facets ``job/lineage.py``; this part feeds them the options.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import Context

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.job import api_key_secret, lineage, resume
from airflow_volcano_wandb.job.job_facts import JobFacts
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity, wandb_run_of
from airflow_volcano_wandb.job.resume import Resumption
from airflow_volcano_wandb.parts.options import option
from airflow_volcano_wandb.parts.resumption import XCOM_RESUMED_FROM_INTENT
from airflow_volcano_wandb.parts.wandb_report import RUN_XCOMS, WandbReport, run_context
from airflow_volcano_wandb.wandb import wandb_run


def _secret_ref(value: Any) -> None:
    if value is not None:
        wandb_run.SecretKeyRef.of(value, "wandb_api_key_secret")


@dataclass(frozen=True, kw_only=True)
class TrainingRun:
    """The W&B run of the operator's job; where it reports is ``report``'s."""

    wandb_run_id: str | None = option(
        None,
        """a W&B run id; by default derived from the task instance, so a retry resumes the
        same run.""",
        templated=True,
    )
    wandb_run_name: str | None = option(None, "the run's display name.", templated=True)
    wandb_group: str | None = option(
        None,
        """the run's W&B group; by default the DAG run (``<dag_id>/<run_id>``). Give every
        map index of a sweep the same one (see ``docs/sweeps.md``).""",
        templated=True,
    )
    wandb_sweep_id: str | None = option(
        None,
        "a W&B sweep id (``WANDB_SWEEP_ID``): the run joins that sweep's view in W&B.",
        templated=True,
    )
    wandb_rank_mode: str = option(
        "master",
        """``master`` (rank 0 owns the one run; other ranks are kept from starting runs) or
        ``shared`` (every rank writes to the one run). See docs/wandb.md.""",
        templated=True,
    )
    wandb_tags: Sequence[str] | None = option(None, "tags for the run.", templated=True)
    wandb_api_key_secret: tuple[str, str] | None = option(
        None,
        """``(secret_name, key)`` of an existing Secret holding the API key. By default the
        connection's key is written to a Secret owned by the job.""",
        templated=True,
        check=_secret_ref,
    )
    report: WandbReport
    log: Any = None

    def settled(self, resumed: Resumption) -> Resumption:
        """``resumed`` with ``WANDB_RESUME`` settled by asking W&B whether the interrupted
        run exists (online, with an API key)."""
        if self.report.wandb_mode not in (None, "online"):
            return resumed
        return resume.settled_by_wandb(resumed, self._run_in_wandb(resumed.run_id))

    def _run_in_wandb(self, run_id: str) -> bool | None:
        """Whether W&B has the run; None when it cannot be asked or does not answer."""
        hook = self.report.best_effort_hook()
        if not hook.api_key:
            return None
        entity, project = self.report.where(hook)
        try:
            exists = hook.run_exists(run_id, entity=entity, project=project)
        except Exception as exc:  # the trainer's own wandb.init decides then
            self.log.warning("Could not ask W&B whether run %s exists (%s)", run_id, exc)
            return None
        if not exists:
            self.log.info(
                "W&B has no run %s: the interrupted try's trainer never started it, so the "
                "resumed trainer starts it (WANDB_RESUME=allow)",
                run_id,
            )
        return exists

    def spec(
        self,
        context: Context,
        identity: TaskInstanceIdentity,
        hook: WandbHook,
        intent: int,
        resumed: Resumption | None = None,
    ) -> wandb_run.WandbRunSpec:
        """The run of ``intent``, or the interrupted run it resumes; fails before anything is
        submitted when it cannot work."""
        mode, secret = self.report.wandb_mode, self.wandb_api_key_secret
        if secret is None and hook.api_key:
            secret = api_key_secret.fresh_ref()  # a new name per render: per job
        if secret is None and mode in (None, "online"):
            self._no_api_key()
        entity, project = self.report.where(hook)
        try:
            return wandb_run.WandbRunSpec.for_task_instance(
                run_context(context),
                run_id=resumed.run_id if resumed else self.wandb_run_id,
                resume=resumed.wandb_resume if resumed else "allow",
                run_name=self.wandb_run_name,
                group=self.wandb_group or None,
                sweep_id=self.wandb_sweep_id or None,
                tags=self.wandb_tags,
                entity=entity,
                project=project,
                base_url=hook.base_url,
                mode=mode,
                rank_mode=self.wandb_rank_mode,
                api_key_secret=tuple(secret) if secret else None,
                deployment=identity.deployment,
                intent=intent,
            )
        except ValueError as exc:
            raise AirflowException(f"Invalid W&B settings: {exc}") from exc

    def _no_api_key(self) -> None:
        no_key = (
            f"no W&B API key: the connection {self.report.wandb_conn_id!r} has no password "
            "and no wandb_api_key_secret is given"
        )
        if self.report.wandb_mode == "online":  # the pods would fail inside the trainer
            raise AirflowException(
                f"wandb_mode='online' but {no_key}. Set one of them, or wandb_mode="
                "'offline'. Nothing was submitted."
            )
        self.log.warning(
            "%s; the pods' W&B SDK runs in its default (online) mode without one unless "
            "their image sets WANDB_MODE. Set a key, or wandb_mode='offline'",
            no_key[0].upper() + no_key[1:],
        )

    def publish(
        self, ti: Any, spec: wandb_run.WandbRunSpec, job: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The run the job writes to, pushed to XCom; returned as ``run`` (keyed as pushed).
        A reattached job keeps the run it was submitted with, whatever this try rendered."""
        if (named := wandb_run_of(job)) and named != spec.run_id:
            spec = dataclasses.replace(spec, run_id=named)
        run = dict(zip(RUN_XCOMS, (spec.run_id, spec.url), strict=True))
        for key, value in run.items():
            ti.xcom_push(key=key, value=value)
        if spec.url:
            self.log.info("W&B run: %s", spec.url)
        return run


def pulled_run(ti: Any, task_id: str) -> dict[str, Any]:
    """The ``run`` :meth:`TrainingRun.publish` pushed (and a resumed try's intent), read back
    from XCom."""
    # map_indexes: a mapped task's own values, not a list of every map index's.
    pulled = {
        key: ti.xcom_pull(task_ids=task_id, key=key, map_indexes=ti.map_index)
        for key in (*RUN_XCOMS, XCOM_RESUMED_FROM_INTENT)
    }
    if pulled[XCOM_RESUMED_FROM_INTENT] is None:  # pushed only by a resumed try
        del pulled[XCOM_RESUMED_FROM_INTENT]
    return pulled


def run_lineage(
    report: WandbReport,
    facts: JobFacts | None,
    run: Mapping[str, Any],
    summary: Mapping[str, Any] | None,
) -> Any:
    """OpenLineage for a try, as far as it got: the Volcano job, the W&B run, its artifacts
    (docs/lineage.md)."""
    hook = report.best_effort_hook()
    entity, project = report.where(hook)
    artifacts = lineage.read_artifacts(
        hook,
        run.get("wandb_run_id"),
        entity=entity,
        project=project,
        mode=report.wandb_mode,
        has_key=bool(hook.api_key),
        log=report.log,
    )
    return lineage.operator_lineage(
        facts or JobFacts.from_job({"metadata": {}}),
        run,
        summary=summary,
        entity=entity,
        project=project,
        base_url=hook.base_url,
        artifacts=artifacts,
    )
