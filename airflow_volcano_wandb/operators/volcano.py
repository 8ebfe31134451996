"""Submit a Volcano PyTorch job from a W&B Launch queue template and wait for it.

A thin Airflow shell: rendering is ``template``, the W&B run is ``wandb_run``, submitting and
reattaching is ``submission``, the key's Secret is ``api_key_secret``, the wait is the
trigger (``sync_wait`` in sync mode), the verdict is ``outcome``, and what a failure means
is ``job_report``. See docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow.configuration import conf
from airflow.sdk import BaseOperator, Context
from urllib3.exceptions import HTTPError as Urllib3Error

from airflow_volcano_wandb import (
    api_key_secret,
    cleanup,
    job_report,
    naming,
    submission,
    wandb_run,
)
from airflow_volcano_wandb.airflow_compat import AirflowException, AirflowTaskTimeout
from airflow_volcano_wandb.cleanup import OnFinishAction
from airflow_volcano_wandb.deployment import configured_deployment, warn_of_other_deployments
from airflow_volcano_wandb.hooks.volcano import VolcanoConnectionMixin
from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.job_report import mark_reported
from airflow_volcano_wandb.job_status import interpret, job_ref
from airflow_volcano_wandb.links.wandb import WandbRunLink
from airflow_volcano_wandb.outcome import Outcome, WaitResult
from airflow_volcano_wandb.ownership import (
    INTENT_LABEL,
    WANDB_RUN_LABEL,
    TaskInstanceIdentity,
    next_intent,
    wandb_run_of,
)
from airflow_volcano_wandb.sync_wait import wait_in_process
from airflow_volcano_wandb.template import RunEnv, TemplateError, render_job
from airflow_volcano_wandb.triggers.volcano import DEFAULT_WATCH_FAILURE_GRACE, VolcanoJobTrigger

XCOM_JOB = "volcano_job"
XCOM_RUN_ID = "wandb_run_id"
XCOM_RUN_URL = "wandb_run_url"
XCOM_SUMMARY = "wandb_summary"
RUN_XCOMS = (XCOM_RUN_ID, XCOM_RUN_URL)  # also the keys of the run's dict
DEFAULT_FINISHED_JOB_TTL = 7 * 24 * 3600


class VolcanoPyTorchJobOperator(VolcanoConnectionMixin, BaseOperator):
    """Run a multi-node PyTorch job on Volcano from a W&B Launch queue template.

    Two template layers apply, in this order. First Airflow renders ``{{ }}`` Jinja in the
    templated fields when the task runs (``params``, ``ds``, XComs...). Then the queue
    template's own ``${ }`` run macros are filled (``${image_uri}``, ``${run_id}``,
    ``${run_name}``, ``${entity_name}``, ``${project_name}``, ``${author}`` and ``macros``),
    structurally: a value never becomes YAML, so it cannot add fields.

    One task instance owns at most one live job, whatever its tries: the job carries labels
    naming the task instance, and a retry or a restarted worker finds it. A job still running
    is reattached; a completed one counts as this task's success without resubmitting; a
    failed, aborted or terminated one is deleted and submitted again.

    :param template: the queue template: a path to ``.yaml``/``.yml``/``.json`` (resolved in
        the DAG folder too), YAML or JSON text, a dict, a W&B queue config
        (``{"resource_args": {"kubernetes": ...}}``), or ``wandb-queue://<entity>/<queue>`` to
        read it from a W&B Launch queue.
    :param image_uri: the training image, the ``${image_uri}`` macro.
    :param replicas: replicas per task name, e.g. ``{"worker": 3}``; digit strings from the
        Trigger form are accepted. Gang ``minAvailable`` follows (see docs/templates.md).
    :param macros: further ``${name}`` values, or overrides of the built-ins.
    :param namespace: where the job runs; else the template's ``metadata.namespace`` (only
        for a template from the DAG: a W&B queue's must be in ``allowed_namespaces``), else
        the connection's namespace, else ``default``.
    :param env: extra env for every container, merged by name (this wins).
    :param container_resources: container resources per task name, e.g.
        ``{"worker": {"limits": {"nvidia.com/gpu": 8}}}`` (``resources`` is taken by Airflow).
    :param command: container command per task name.
    :param args: container args per task name.
    :param pod_annotations: annotations for every pod template.
    :param job_name: the job's name; by default the template's (the seed's
        ``wandb-job-${run_id}`` is deterministic per task instance).
    :param volcano_queue: the Volcano queue (``spec.queue``); by default the template's.
        (``queue`` is Airflow's own: the executor queue the task runs in.)
    :param add_master_policy: give the ``pytorch`` plugin's master task
        ``TaskCompleted -> CompleteJob`` when the template lacks it.
    :param gang: ``all_ranks`` (default): a PyTorch job's ``minAvailable`` is raised to its
        world size, so no rank holds GPUs before every rank can run; ``template`` keeps the
        template's value (elastic trainers).
    :param pod_security: the Pod Security Standards level every pod must meet:
        ``baseline`` (default), ``restricted`` or ``privileged`` (no check). See
        docs/security.md.
    :param allowed_images: fnmatch patterns every rendered image must match (for images
        typed into the Trigger form); ``None`` allows any.
    :param allowed_namespaces: namespaces the job may land in; ``None`` allows any.
    :param service_account: the pods' ``serviceAccountName``; a template may name another
        only when it is in ``allowed_service_accounts``.
    :param allowed_service_accounts: service accounts a template may name.
    :param kubernetes_conn_id: the cncf.kubernetes ``kubernetes`` connection.
    :param config_file: a kubeconfig path, overriding the connection's.
    :param cluster_context: a kubeconfig context, overriding the connection's.
    :param in_cluster: use the in-cluster service account.
    :param wandb_conn_id: the ``wandb`` connection (API key, base URL, entity, project).
    :param wandb_entity: W&B entity; else the connection's ``entity`` extra.
    :param wandb_project: W&B project; else the connection's ``project`` extra.
    :param wandb_run_id: a W&B run id; by default derived from the task instance, so a retry
        resumes the same run.
    :param wandb_run_name: the run's display name.
    :param wandb_mode: ``online``, ``offline`` or ``disabled`` for the run's owner.
    :param wandb_rank_mode: ``master`` (rank 0 owns the one run; other ranks are kept from
        starting runs) or ``shared`` (every rank writes to the one run). See docs/wandb.md.
    :param wandb_tags: tags for the run.
    :param wandb_api_key_secret: ``(secret_name, key)`` of an existing Secret holding the API
        key. By default the connection's key is written to a Secret owned by the job.
    :param wandb_summary_keys: summary metrics to read from W&B after success and push to
        XCom ``wandb_summary`` (best-effort: a missing summary is a warning and ``{}``).
    :param wait_for_completion: wait for the job to end (else return once submitted, for
        ``VolcanoJobSensor``).
    :param deferrable: wait in the triggerer, freeing the worker slot.
    :param poll_interval: seconds between timeout checks while waiting; job state itself
        arrives by watch.
    :param pending_timeout: seconds until every rank must be placed and running; else the
        task fails with Volcano's reason and the job is deleted.
    :param watch_failure_grace: seconds the watch may keep failing (lost permission, expired
        credentials, apiserver down) before the task fails; the job is never deleted for
        that, and the next try reattaches to it.
    :param finished_job_ttl: seconds a finished job may stay before Volcano deletes it
        (``spec.ttlSecondsAfterFinished``, unless the template sets one); default 7 days, so
        kept jobs and their Secrets do not pile up. ``None``: no limit.
    :param on_finish_action: ``delete_succeeded`` (default: a failed job stays for
        inspection until a retry replaces it), ``delete`` or ``keep``.
    :param reattach_on_restart: reattach to a live job of this task instance; if False it is
        deleted and submitted again.
    :param log_lines: lines of pod logs to show on completion or failure.
    :param max_replicas: the largest replica count accepted for a task.
    """

    template_fields: Sequence[str] = (
        "template",
        "image_uri",
        "replicas",
        "macros",
        "namespace",
        "env",
        "container_resources",
        "command",
        "args",
        "job_name",
        "volcano_queue",
        "service_account",
        "wandb_entity",
        "wandb_project",
        "wandb_run_id",
        "wandb_run_name",
        "wandb_mode",
        "wandb_rank_mode",
        "wandb_tags",
        "wandb_api_key_secret",
        "pod_annotations",
        "pending_timeout",
        "on_finish_action",
    )
    template_ext: Sequence[str] = (".yaml", ".yml", ".json")
    template_fields_renderers = {"template": "yaml", "macros": "json", "replicas": "json"}
    operator_extra_links = (WandbRunLink(),)
    ui_color = "#ffd166"

    def __init__(
        self,
        *,
        template: str | Mapping[str, Any],
        image_uri: str | None = None,
        replicas: Mapping[str, int | str] | None = None,
        macros: Mapping[str, Any] | None = None,
        namespace: str | None = None,
        env: Mapping[str, str] | None = None,
        container_resources: Mapping[str, Any] | None = None,
        command: Mapping[str, list[str]] | None = None,
        args: Mapping[str, list[str]] | None = None,
        pod_annotations: Mapping[str, str] | None = None,
        job_name: str | None = None,
        volcano_queue: str | None = None,
        add_master_policy: bool = True,
        gang: str = "all_ranks",
        pod_security: str = "baseline",
        allowed_images: Sequence[str] | None = None,
        allowed_namespaces: Sequence[str] | None = None,
        service_account: str | None = None,
        allowed_service_accounts: Sequence[str] | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        config_file: str | None = None,
        cluster_context: str | None = None,
        in_cluster: bool | None = None,
        wandb_conn_id: str | None = "wandb_default",
        wandb_entity: str | None = None,
        wandb_project: str | None = None,
        wandb_run_id: str | None = None,
        wandb_run_name: str | None = None,
        wandb_mode: str | None = None,
        wandb_rank_mode: str = "master",
        wandb_tags: Sequence[str] | None = None,
        wandb_api_key_secret: tuple[str, str] | None = None,
        wandb_summary_keys: Sequence[str] | None = None,
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 10.0,
        pending_timeout: float | str | None = None,
        watch_failure_grace: float = DEFAULT_WATCH_FAILURE_GRACE,
        finished_job_ttl: int | None = DEFAULT_FINISHED_JOB_TTL,
        on_finish_action: OnFinishAction = "delete_succeeded",
        reattach_on_restart: bool = True,
        log_lines: int = 50,
        max_replicas: int = 1024,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if "{{" not in str(on_finish_action):
            cleanup.check_on_finish_action(on_finish_action)
        self.template, self.image_uri, self.replicas = template, image_uri, replicas
        self.macros, self.namespace, self.env = macros, namespace, env
        self.container_resources, self.command, self.args = container_resources, command, args
        self.pod_annotations, self.job_name = pod_annotations, job_name
        self.volcano_queue = volcano_queue
        self.add_master_policy, self.pod_security = add_master_policy, pod_security
        self.gang = gang
        self.allowed_images, self.allowed_namespaces = allowed_images, allowed_namespaces
        self.service_account = service_account
        self.allowed_service_accounts = allowed_service_accounts
        self.kubernetes_conn_id, self.config_file = kubernetes_conn_id, config_file
        self.cluster_context, self.in_cluster = cluster_context, in_cluster
        self.wandb_conn_id, self.wandb_entity = wandb_conn_id, wandb_entity
        self.wandb_project, self.wandb_run_id = wandb_project, wandb_run_id
        self.wandb_run_name, self.wandb_mode = wandb_run_name, wandb_mode
        self.wandb_rank_mode, self.wandb_tags = wandb_rank_mode, wandb_tags
        self.wandb_api_key_secret = wandb_api_key_secret
        self.wandb_summary_keys = list(wandb_summary_keys or [])
        self.wait_for_completion, self.deferrable = wait_for_completion, deferrable
        self.poll_interval, self.pending_timeout = poll_interval, pending_timeout
        self.watch_failure_grace, self.finished_job_ttl = watch_failure_grace, finished_job_ttl
        self.on_finish_action, self.reattach_on_restart = on_finish_action, reattach_on_restart
        self.log_lines, self.max_replicas = log_lines, max_replicas
        #: The job this try submitted or reattached to, as soon as it exists (for on_kill).
        self._job: dict[str, str] | None = None
        self._try_number: int | None = None

    @property
    def wandb_hook(self) -> WandbHook:
        return WandbHook(wandb_conn_id=self.wandb_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        identity = TaskInstanceIdentity(
            ti.dag_id, ti.task_id, ti.run_id, ti.map_index, deployment=configured_deployment()
        )
        self._try_number = ti.try_number
        cleanup.check_on_finish_action(self.on_finish_action)
        wandb_hook = self.wandb_hook

        def render(intent: int) -> tuple[wandb_run.WandbRunSpec, dict[str, Any]]:
            spec = self._wandb_spec(context, identity, wandb_hook, intent)
            return spec, self._render_job(context, identity, spec, wandb_hook, intent)

        api_key = None if self.wandb_api_key_secret else wandb_hook.api_key
        spec, job = self._submit(render, identity, api_key)
        if wandb_run_of(job) and wandb_run_of(job) != spec.run_id:  # reattached: its run
            spec = dataclasses.replace(spec, run_id=wandb_run_of(job))
        run = {"wandb_run_id": spec.run_id, "wandb_run_url": spec.url}
        ti.xcom_push(key=XCOM_JOB, value=self._job)
        ti.xcom_push(key=XCOM_RUN_ID, value=spec.run_id)
        ti.xcom_push(key=XCOM_RUN_URL, value=spec.url)
        if spec.url:
            self.log.info("W&B run: %s", spec.url)

        status = interpret(job)
        if status.terminal:  # only a Completed job is ever reused
            self.log.info("Job %s Completed in an earlier try; not resubmitting", status.name)
            return self._report(context, WaitResult.from_status(status), run)
        if not self.wait_for_completion:
            return {**self._job, **run}
        trigger = self._trigger()
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete", kwargs={"run": run})
        try:
            result = wait_in_process(self.hook, trigger, job, self.log)
        except BaseException:
            # A kill or any failure while waiting here: nobody would wait on the job any more.
            self._delete_job()
            raise
        return self._report(context, result, run)

    def execute_complete(
        self, context: Context, event: dict[str, Any], run: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resume after the trigger fired: report, clean up, and succeed or fail."""
        self._try_number = context["ti"].try_number
        if run is None:  # dag.test() resumes without the deferral's kwargs: ask XCom
            ti = context["ti"]
            run = {key: ti.xcom_pull(task_ids=self.task_id, key=key) for key in RUN_XCOMS}
        return self._report(context, WaitResult.from_event(event), dict(run))

    def _wandb_spec(
        self, context: Context, identity: TaskInstanceIdentity, wandb_hook: WandbHook, intent: int
    ) -> wandb_run.WandbRunSpec:
        ti, logical_date = context["ti"], getattr(context["dag_run"], "logical_date", None)
        secret = self.wandb_api_key_secret
        if secret is None and wandb_hook.api_key:
            secret = api_key_secret.secret_ref(identity)
        if secret is None and self.wandb_mode in (None, "online"):
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
        try:
            return wandb_run.WandbRunSpec.for_task_instance(
                wandb_run.AirflowRunContext(
                    dag_id=ti.dag_id,
                    dag_run_id=ti.run_id,
                    task_id=ti.task_id,
                    try_number=ti.try_number,
                    logical_date=logical_date.isoformat() if logical_date else None,
                    task_url=getattr(ti, "log_url", None),
                    map_index=ti.map_index,
                ),
                run_id=self.wandb_run_id,
                run_name=self.wandb_run_name,
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

    def _render_job(
        self,
        context: Context,
        identity: TaskInstanceIdentity,
        spec: wandb_run.WandbRunSpec,
        wandb_hook: WandbHook,
        intent: int,
    ) -> dict[str, Any]:
        macros = {**wandb_run.macro_values(spec, author=self.owner), **(self.macros or {})}
        if self.image_uri is not None:
            macros["image_uri"] = self.image_uri
        # A template from the DAG is its author's, like namespace=; a W&B queue's is edited by
        # people outside the Airflow team, so its namespace must be allow-listed.
        from_queue = wandb_run.is_queue_ref(self.template)
        try:
            template = wandb_hook.get_template(self.template) if from_queue else self.template
            body = render_job(
                template,
                macros=macros,
                replicas=self.replicas,
                env=self.env,
                resources=self.container_resources,
                command=self.command,
                args=self.args,
                labels={
                    **identity.labels(),
                    **_run_label(spec.run_id),
                    INTENT_LABEL: str(intent),
                },
                annotations=identity.annotations(context["ti"].try_number),
                pod_annotations=self.pod_annotations,
                name=self.job_name,
                namespace=self.namespace,
                queue=self.volcano_queue,
                add_master_policy=self.add_master_policy,
                max_replicas=self.max_replicas,
                gang=self.gang,
                pod_security=self.pod_security,
                allowed_images=self.allowed_images,
                allowed_namespaces=self.allowed_namespaces,
                template_namespace_allowed=not from_queue,
                service_account=self.service_account,
                allowed_service_accounts=self.allowed_service_accounts,
                run_env=RunEnv(
                    master=wandb_run.container_env(spec, is_master_task=True),
                    others=wandb_run.container_env(spec, is_master_task=False),
                ),
            )
        except (TemplateError, ValueError) as exc:
            raise AirflowException(f"Template error, nothing was submitted: {exc}") from exc
        if not body["metadata"].get("namespace"):
            body["metadata"]["namespace"] = self.hook.get_namespace() or "default"
        if self.finished_job_ttl is not None:
            body["spec"].setdefault("ttlSecondsAfterFinished", int(self.finished_job_ttl))
        return body

    def _submit(
        self,
        render: Callable[[int], tuple[wandb_run.WandbRunSpec, dict[str, Any]]],
        identity: TaskInstanceIdentity,
        api_key: str | None,
    ) -> tuple[wandb_run.WandbRunSpec, dict[str, Any]]:
        """Render for this try's intent, then submit or reattach; the spec and the job."""
        try_number = self._try_number or 1
        spec, body = render(try_number)  # bad input fails here, before any API client exists
        hook = self.hook
        try:
            namespace = body["metadata"]["namespace"]
            if not identity.deployment:
                warn_of_other_deployments(hook, namespace, self.log)
            existing = hook.list_jobs(namespace, identity.selector())
            intent = next_intent(existing, try_number)
            if intent != try_number:
                spec, body = render(intent)
            job, created = submission.submit_or_reattach(
                hook,
                body,
                identity,
                try_number=try_number,
                reattach=self.reattach_on_restart,
                existing=existing,
                task_log=self.log,
            )
            self._job = job_ref(job)
            if api_key:
                self._hand_key_to(job, identity, api_key, created)
        except submission.SubmissionError as exc:
            raise AirflowException(str(exc)) from exc
        except (Urllib3Error, ConnectionError) as exc:  # the hook's bounded retries gave up
            raise AirflowException(
                f"Submission failed: could not reach the Kubernetes API at "
                f"{hook.api_client.configuration.host} ({type(exc).__name__}: {exc}). If the "
                "job was created before the connection was lost, the next try finds it and "
                "reattaches; otherwise nothing was submitted."
            ) from exc
        return spec, job

    def _hand_key_to(
        self, job: dict[str, Any], identity: TaskInstanceIdentity, api_key: str, created: bool
    ) -> None:
        """Write the key's Secret for the job; a new job that cannot have it is withdrawn.

        Its pods would wait for the Secret for ever, or, when the name is taken by someone
        else's Secret, read their key. A reattached job keeps running, and so does any job
        when the API was out of reach: the next try reattaches and writes the Secret.
        """
        try:
            api_key_secret.store_for_job(self.hook, identity, job, api_key)
        except (Urllib3Error, ConnectionError):
            raise
        except Exception as exc:
            if created or isinstance(exc, api_key_secret.SecretOwnedElsewhereError):
                self._delete_job()
                raise AirflowException(
                    f"The W&B API key could not be given to the job ({exc}); the job was withdrawn"
                ) from exc
            raise

    def _trigger(self) -> VolcanoJobTrigger:
        assert self._job is not None
        deadline = None
        if self.execution_timeout is not None:
            deadline = time.time() + self.execution_timeout.total_seconds()
        return VolcanoJobTrigger(
            job_name=self._job["name"],
            namespace=self._job["namespace"],
            job_uid=self._job["uid"],
            **self.connection_kwargs(),
            pending_timeout=_seconds(self.pending_timeout),
            deadline=deadline,
            poll_interval=self.poll_interval,
            watch_failure_grace=self.watch_failure_grace,
            try_number=self._try_number,
        )

    def _report(
        self, context: Context, result: WaitResult, run: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Clean up as ``on_finish_action`` says, tell what happened, succeed or fail."""
        self._job = result.job_ref()
        hook = self.hook
        mark_reported(hook, result, context["ti"].try_number, self.log)
        deletes = cleanup.deletes_job(result.outcome, self.on_finish_action)
        if result.outcome.succeeded:
            self.log.info("%s", result.message)
            if self.deferrable:
                job_report.log_master_tail(
                    hook, hook.get_job(result.name, result.namespace), self.log_lines, self.log
                )
            if deletes:
                self._delete_job()
            summary = self._read_summary(run) if self.wandb_summary_keys else None
            if summary is not None:
                context["ti"].xcom_push(key=XCOM_SUMMARY, value=summary)
            return {
                **result.job_ref(),
                **run,
                **({"wandb_summary": summary} if summary is not None else {}),
                "phase": result.phase,
            }
        message = job_report.report_failure(
            hook,
            result,
            delete_job=self._delete_job if deletes else None,
            log_lines=self.log_lines,
            task_log=self.log,
        )
        if result.outcome is Outcome.TIMEOUT:
            raise AirflowTaskTimeout(message)
        raise AirflowException(message)

    def _read_summary(self, run: Mapping[str, Any]) -> dict[str, Any]:
        """The requested W&B summary metrics; empty (with a warning) when they cannot be read."""
        if self.wandb_mode in ("offline", "disabled"):
            self.log.warning("W&B mode is %s: no summary to read back", self.wandb_mode)
            return {}
        try:
            return self.wandb_hook.get_run_summary(
                run["wandb_run_id"],
                entity=self.wandb_entity,
                project=self.wandb_project,
                keys=self.wandb_summary_keys,
            )
        except Exception as exc:
            self.log.warning("Could not read the W&B run's summary (%s); pushing {}", exc)
            return {}

    def _delete_job(self) -> None:
        if self._job:
            self.hook.delete_job_if_owned(self._job, self._try_number, self.log)

    def on_kill(self) -> None:
        """The task was killed while waiting in sync mode: delete the job and its pods."""
        self._delete_job()


def _run_label(run_id: str) -> dict[str, str]:
    """The W&B run id as a job label, so a reattaching try finds the run; only when the id
    is a valid label value (a user's run id may not be)."""
    return {WANDB_RUN_LABEL: run_id} if naming.is_label_value(run_id) else {}


def _seconds(value: float | str | None) -> float | None:
    """A templated duration (the Trigger form sends text) as seconds."""
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AirflowException(
            f"pending_timeout must be a number of seconds, not {value!r}"
        ) from None
