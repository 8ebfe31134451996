"""The W&B side of the operator: which run the job writes to, what is read back from it,
and what is written back: the Airflow task into the run, the run into OpenLineage.

The run itself (id, names, URL, the env every container gets) is the pure ``wandb_run``
module, the link-back ``wandb_backlink``, the facets ``lineage``; this base only turns the
operator's parameters and the task instance into them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_volcano_wandb.airflow_compat import AirflowException, task_state_store
from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.job import api_key_secret, lineage, resume
from airflow_volcano_wandb.job.job_facts import JobFacts
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity, wandb_run_of
from airflow_volcano_wandb.links.wandb import WandbRunLink
from airflow_volcano_wandb.operators.resume import XCOM_RESUMED_FROM_INTENT, ResumeMixin
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wandb import wandb_backlink, wandb_run

#: The XComs a task that waited on a job pushes about its W&B run (also the keys of ``run``).
XCOM_RUN_ID = "wandb_run_id"
XCOM_RUN_URL = "wandb_run_url"
XCOM_SUMMARY = "wandb_summary"
RUN_XCOMS = (XCOM_RUN_ID, XCOM_RUN_URL)

#: W&B calls made after the task's outcome is known must not hold the worker for long: each
#: HTTP request gets BEST_EFFORT_TIMEOUT seconds, each read or write, retries included,
#: BEST_EFFORT_DEADLINE.
BEST_EFFORT_TIMEOUT = 30
BEST_EFFORT_DEADLINE = 60


class WandbReportMixin(BaseOperator):
    """What a task that waited on a job reports to its W&B run: the summary metrics it reads
    back and the link back to the task. Shared by the operator and ``VolcanoJobSensor``, so
    the sensor's wait reports what the operator's own wait reports.

    :param wandb_conn_id: the ``wandb`` connection (API key, base URL, entity, project).
    :param wandb_entity: W&B entity; else the connection's ``entity`` extra.
    :param wandb_project: W&B project; else the connection's ``project`` extra.
    :param wandb_mode: ``online``, ``offline`` or ``disabled`` for the run's owner.
    :param wandb_summary_keys: summary metrics to read from W&B after success and push to
        XCom ``wandb_summary`` (best-effort: a missing summary is a warning and ``{}``).
    """

    template_fields: Sequence[str] = ("wandb_entity", "wandb_project", "wandb_mode")

    def __init__(
        self,
        *,
        wandb_conn_id: str | None = "wandb_default",
        wandb_entity: str | None = None,
        wandb_project: str | None = None,
        wandb_mode: str | None = None,
        wandb_summary_keys: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.wandb_conn_id, self.wandb_entity = wandb_conn_id, wandb_entity
        self.wandb_project, self.wandb_mode = wandb_project, wandb_mode
        self.wandb_summary_keys = list(wandb_summary_keys or [])

    @property
    def wandb_hook(self) -> WandbHook:
        return WandbHook(wandb_conn_id=self.wandb_conn_id)

    @property
    def best_effort_wandb_hook(self) -> WandbHook:
        """The hook for what is read or written after the job: bounded in wall time."""
        return WandbHook(
            wandb_conn_id=self.wandb_conn_id,
            timeout=BEST_EFFORT_TIMEOUT,
            deadline=BEST_EFFORT_DEADLINE,
        )

    def wandb_progress_kwargs(
        self, run_id: str | None, stall_timeout: float | None, hook: WandbHook | None = None
    ) -> dict[str, Any]:
        """The W&B run a stall probe asks for its last step before failing a silent master
        (``WaitSpec.wandb_run``): only with a ``stall_timeout``, for an online run
        (``wandb_mode`` not ``offline`` nor ``disabled``) with a project, of a connection with
        a key (``hook``'s, when loaded already). Its id, never its key."""
        if stall_timeout is None or not run_id or not self.wandb_conn_id:
            return {}
        if self.wandb_mode in ("offline", "disabled"):
            return {}
        hook = hook or self.wandb_hook
        project = self.wandb_project or hook.project
        if not hook.api_key or not project:
            return {}
        return {
            "wandb_conn_id": self.wandb_conn_id,
            "wandb_run_id": run_id,
            "wandb_entity": self.wandb_entity or hook.entity,
            "wandb_project": project,
        }

    def read_summary(self, run: Mapping[str, Any]) -> dict[str, Any]:
        """The requested W&B summary metrics; empty (with a warning) when they cannot be read."""
        if self.wandb_mode in ("offline", "disabled"):
            self.log.warning("W&B mode is %s: no summary to read back", self.wandb_mode)
            return {}
        try:
            return self.best_effort_wandb_hook.get_run_summary(
                run["wandb_run_id"],
                entity=self.wandb_entity,
                project=self.wandb_project,
                keys=self.wandb_summary_keys,
            )
        except Exception as exc:
            self.log.warning("Could not read the W&B run's summary (%s); pushing {}", exc)
            return {}

    def push_summary(self, ti: Any, run: Mapping[str, Any]) -> dict[str, Any] | None:
        """The summary metrics asked for, read and pushed to XCom; None when none are."""
        if not self.wandb_summary_keys:
            return None
        summary = self.read_summary(run)
        ti.xcom_push(key=XCOM_SUMMARY, value=summary)
        return summary

    def link_back(self, context: Context, run: Mapping[str, Any], outcome: str) -> None:
        """Write this task and its outcome into the W&B run; never fails the task."""
        hook = self.best_effort_wandb_hook
        wandb_backlink.link_back(
            hook,
            run_context(context),
            outcome,
            run_id=run["wandb_run_id"],
            entity=self.wandb_entity or hook.entity,
            project=self.wandb_project or hook.project,
            mode=self.wandb_mode,
            has_key=bool(hook.api_key),
            log=self.log,
            resumed={key: run.get(key) for key in wandb_backlink.RESUME_KEYS},
        )


class WandbRunMixin(ResumeMixin, WandbReportMixin):
    """Parameters and steps of the W&B run a task's job writes to; what is reported back is
    :class:`WandbReportMixin`'s (connection, entity, project, mode, summary keys), whether a
    try continues an interrupted try's run :class:`.resume.ResumeMixin`'s (``resume_on``).

    :param wandb_run_id: a W&B run id; by default derived from the task instance, so a retry
        resumes the same run.
    :param wandb_run_name: the run's display name.
    :param wandb_group: the run's W&B group; by default the DAG run (``<dag_id>/<run_id>``).
        Give every map index of a sweep the same one (see ``docs/sweeps.md``).
    :param wandb_sweep_id: a W&B sweep id (``WANDB_SWEEP_ID``): the run joins that sweep's
        view in W&B.
    :param wandb_rank_mode: ``master`` (rank 0 owns the one run; other ranks are kept from
        starting runs) or ``shared`` (every rank writes to the one run). See docs/wandb.md.
    :param wandb_tags: tags for the run.
    :param wandb_api_key_secret: ``(secret_name, key)`` of an existing Secret holding the API
        key. By default the connection's key is written to a Secret owned by the job.
    """

    template_fields: Sequence[str] = (
        *WandbReportMixin.template_fields,
        *ResumeMixin.template_fields,
        "wandb_run_id",
        "wandb_run_name",
        "wandb_group",
        "wandb_sweep_id",
        "wandb_rank_mode",
        "wandb_tags",
        "wandb_api_key_secret",
    )
    operator_extra_links = (WandbRunLink(),)

    def __init__(
        self,
        *,
        wandb_run_id: str | None = None,
        wandb_run_name: str | None = None,
        wandb_group: str | None = None,
        wandb_sweep_id: str | None = None,
        wandb_rank_mode: str = "master",
        wandb_tags: Sequence[str] | None = None,
        wandb_api_key_secret: tuple[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.wandb_run_id, self.wandb_run_name = wandb_run_id, wandb_run_name
        self.wandb_group, self.wandb_sweep_id = wandb_group, wandb_sweep_id
        self.wandb_rank_mode, self.wandb_tags = wandb_rank_mode, wandb_tags
        self.wandb_api_key_secret = wandb_api_key_secret
        #: What this try ran and trained into, once it ended (for OpenLineage).
        self._facts: JobFacts | None = None
        self._run: dict[str, Any] = {}
        self._summary: dict[str, Any] | None = None

    def resume_interrupted_run(self, hook: Any, store: Any, try_number: int) -> bool:
        """:meth:`.ResumeMixin.resume_interrupted_run`, with ``WANDB_RESUME`` settled by
        asking W&B whether the interrupted run exists (online, with an API key)."""
        if not super().resume_interrupted_run(hook, store, try_number):
            return False
        resumed = self._resumed
        if resumed is not None and self.wandb_mode in (None, "online"):
            self._resumed = resume.settled_by_wandb(resumed, self._run_in_wandb(resumed.run_id))
        return True

    def _run_in_wandb(self, run_id: str) -> bool | None:
        """Whether W&B has the run; None when it cannot be asked or does not answer."""
        hook = self.best_effort_wandb_hook
        if not hook.api_key:
            return None
        try:
            exists = hook.run_exists(
                run_id,
                entity=self.wandb_entity or hook.entity,
                project=self.wandb_project or hook.project,
            )
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

    def wandb_spec(
        self,
        context: Context,
        identity: TaskInstanceIdentity,
        wandb_hook: WandbHook,
        intent: int,
    ) -> wandb_run.WandbRunSpec:
        """The run of ``intent``, or the interrupted run it resumes (``resume_interrupted_run``);
        fails before anything is submitted when it cannot work."""
        resumed = self._resumed
        secret = self.wandb_api_key_secret
        if secret is None and wandb_hook.api_key:
            secret = api_key_secret.fresh_ref()  # a new name per render: per job
        if secret is None and self.wandb_mode in (None, "online"):
            self._no_api_key()
        try:
            return wandb_run.WandbRunSpec.for_task_instance(
                run_context(context),
                run_id=resumed.run_id if resumed else self.wandb_run_id,
                resume=resumed.wandb_resume if resumed else "allow",
                run_name=self.wandb_run_name,
                group=self.wandb_group or None,
                sweep_id=self.wandb_sweep_id or None,
                tags=self.wandb_tags,
                entity=self.wandb_entity or wandb_hook.entity,
                project=self.wandb_project or wandb_hook.project,
                base_url=wandb_hook.base_url,
                mode=self.wandb_mode,
                rank_mode=self.wandb_rank_mode,
                api_key_secret=tuple(secret) if secret else None,
                deployment=identity.deployment,
                intent=intent,
            )
        except ValueError as exc:
            raise AirflowException(f"Invalid W&B settings: {exc}") from exc

    def publish_run(
        self, ti: Any, spec: wandb_run.WandbRunSpec, job: Mapping[str, Any], store: Any = None
    ) -> dict[str, Any]:
        """The run the job writes to, pushed to XCom and recorded in the task state ``store``
        for the next try; returned as ``run`` (keyed as pushed).

        A reattached job keeps the run it was submitted with, whatever this try rendered.
        """
        self.record_run(store, job)
        if wandb_run_of(job) and wandb_run_of(job) != spec.run_id:
            spec = dataclasses.replace(spec, run_id=wandb_run_of(job))
        run = dict(zip(RUN_XCOMS, (spec.run_id, spec.url), strict=True))
        for key, value in run.items():
            ti.xcom_push(key=key, value=value)
        if spec.url:
            self.log.info("W&B run: %s", spec.url)
        self.say_resumed(job, ti, run)
        return run

    def end_run(
        self, context: Context, run: Mapping[str, Any], result: WaitResult, error: Exception | None
    ) -> None:
        """The try's wait ended (``error``: what the task fails with; None for a success): tell
        the W&B run (the link back) and the next try (the cause, for ``resume_on``)."""
        self.record_cause(task_state_store(context), result.uid, error)
        self.link_back(context, run, "success" if error is None else result.outcome.value)

    def pulled_run(self, ti: Any) -> dict[str, Any]:
        """The ``run`` :meth:`publish_run` pushed, read back from XCom."""
        # map_indexes: a mapped task's own values, not a list of every map index's.
        pulled = {
            key: ti.xcom_pull(task_ids=self.task_id, key=key, map_indexes=ti.map_index)
            for key in (*RUN_XCOMS, XCOM_RESUMED_FROM_INTENT)
        }
        if pulled[XCOM_RESUMED_FROM_INTENT] is None:  # pushed only by a resumed try
            del pulled[XCOM_RESUMED_FROM_INTENT]
        return pulled

    def _no_api_key(self) -> None:
        no_key = (
            f"no W&B API key: the connection {self.wandb_conn_id!r} has no password and "
            "no wandb_api_key_secret is given"
        )
        if self.wandb_mode == "online":  # the pods would fail inside the trainer
            raise AirflowException(
                f"wandb_mode='online' but {no_key}. Set one of them, or wandb_mode="
                "'offline'. Nothing was submitted."
            )
        self.log.warning(
            "%s; the pods' W&B SDK runs in its default (online) mode without one unless "
            "their image sets WANDB_MODE. Set a key, or wandb_mode='offline'",
            no_key[0].upper() + no_key[1:],
        )

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the Volcano job, the W&B run, its artifacts (docs/lineage.md)."""
        return self._lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """OpenLineage for a failed try: the same facets, as far as the try got."""
        return self._lineage()

    def _lineage(self) -> Any:
        hook = self.best_effort_wandb_hook
        entity, project = self.wandb_entity or hook.entity, self.wandb_project or hook.project
        artifacts = lineage.read_artifacts(
            hook,
            self._run.get("wandb_run_id"),
            entity=entity,
            project=project,
            mode=self.wandb_mode,
            has_key=bool(hook.api_key),
            log=self.log,
        )
        return lineage.operator_lineage(
            self._facts or JobFacts.from_job({"metadata": {}}),
            self._run,
            summary=self._summary,
            entity=entity,
            project=project,
            base_url=hook.base_url,
            artifacts=artifacts,
        )


def run_context(context: Context) -> wandb_run.AirflowRunContext:
    """The task instance, as the W&B run is told about it."""
    ti, logical_date = context["ti"], getattr(context.get("dag_run"), "logical_date", None)
    return wandb_run.AirflowRunContext(
        dag_id=ti.dag_id,
        dag_run_id=ti.run_id,
        task_id=ti.task_id,
        try_number=ti.try_number,
        logical_date=logical_date.isoformat() if logical_date else None,
        task_url=getattr(ti, "log_url", None),
        map_index=ti.map_index,
    )
