"""Submit a Volcano PyTorch job from a W&B Launch queue template and wait for it."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from airflow.configuration import conf
from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from airflow_volcano_wandb import job_status, wandb_run
from airflow_volcano_wandb._template.overrides import apply_env
from airflow_volcano_wandb.diagnostics import task_of
from airflow_volcano_wandb.hooks.volcano import (
    RETRYABLE_STATUSES,
    JobExistsError,
    KubernetesPermissionError,
    SecretExistsError,
    VolcanoConnectionMixin,
    VolcanoHook,
    api_message,
)
from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.links.wandb import WandbRunLink
from airflow_volcano_wandb.log_follower import MasterLogFollower
from airflow_volcano_wandb.ownership import TaskInstanceIdentity, owner_of
from airflow_volcano_wandb.template import TemplateError, master_task_name, render_job
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger

OnFinishAction = Literal["delete", "delete_succeeded", "keep"]
ON_FINISH_ACTIONS = ("delete", "delete_succeeded", "keep")
XCOM_JOB = "volcano_job"
XCOM_RUN_ID = "wandb_run_id"
XCOM_RUN_URL = "wandb_run_url"
XCOM_SUMMARY = "wandb_summary"


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
    :param namespace: where the job runs; else the template's ``metadata.namespace``, else
        the connection's namespace, else ``default``.
    :param env: extra env for every container, merged by name (this wins).
    :param container_resources: container resources per task name, e.g.
        ``{"worker": {"limits": {"nvidia.com/gpu": 8}}}`` (``resources`` is taken by Airflow).
    :param command: container command per task name.
    :param args: container args per task name.
    :param pod_annotations: annotations for every pod template.
    :param job_name: the job's name; by default the template's (the seed's
        ``wandb-job-${run_id}`` is deterministic per task instance).
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
        XCom ``wandb_summary``.
    :param wait_for_completion: wait for the job to end (else return once submitted, for
        ``VolcanoJobSensor``).
    :param deferrable: wait in the triggerer, freeing the worker slot.
    :param poll_interval: seconds between timeout checks while waiting; job state itself
        arrives by watch.
    :param pending_timeout: seconds the job may stay ``Pending`` before the task fails with
        Volcano's unschedulable reason and the job is deleted.
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
        "wandb_entity",
        "wandb_project",
        "wandb_run_name",
        "pod_annotations",
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
        pending_timeout: float | None = None,
        on_finish_action: OnFinishAction = "delete_succeeded",
        reattach_on_restart: bool = True,
        log_lines: int = 50,
        max_replicas: int = 1024,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if on_finish_action not in ON_FINISH_ACTIONS:
            raise ValueError(
                f"on_finish_action must be one of {ON_FINISH_ACTIONS}, got {on_finish_action!r}"
            )
        self.template = template
        self.image_uri = image_uri
        self.replicas = replicas
        self.macros = macros
        self.namespace = namespace
        self.env = env
        self.container_resources = container_resources
        self.command = command
        self.args = args
        self.pod_annotations = pod_annotations
        self.job_name = job_name
        self.kubernetes_conn_id = kubernetes_conn_id
        self.config_file = config_file
        self.cluster_context = cluster_context
        self.in_cluster = in_cluster
        self.wandb_conn_id = wandb_conn_id
        self.wandb_entity = wandb_entity
        self.wandb_project = wandb_project
        self.wandb_run_id = wandb_run_id
        self.wandb_run_name = wandb_run_name
        self.wandb_mode = wandb_mode
        self.wandb_rank_mode = wandb_rank_mode
        self.wandb_tags = wandb_tags
        self.wandb_api_key_secret = wandb_api_key_secret
        self.wandb_summary_keys = list(wandb_summary_keys or [])
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.pending_timeout = pending_timeout
        self.on_finish_action = on_finish_action
        self.reattach_on_restart = reattach_on_restart
        self.log_lines = log_lines
        self.max_replicas = max_replicas
        self._submitted: dict[str, str] | None = None

    # ---- hooks ---------------------------------------------------------------------------

    @property
    def wandb_hook(self) -> WandbHook:
        return WandbHook(wandb_conn_id=self.wandb_conn_id)

    # ---- execute -------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        identity = TaskInstanceIdentity(ti.dag_id, ti.task_id, ti.run_id, ti.map_index)
        wandb_hook = self.wandb_hook
        spec = self._wandb_spec(context, wandb_hook)
        body = self._render_job(context, identity, spec, wandb_hook)
        namespace = body["metadata"]["namespace"]
        if spec.api_key_secret is None and wandb_hook.api_key:
            spec = dataclasses.replace(
                spec, api_key_secret=wandb_run.SecretKeyRef(self._secret_name(body), "api-key")
            )
        add_wandb_env(body, spec)
        hook = self.hook

        try:
            secret = self._store_api_key(hook, body, identity, wandb_hook)
            try:
                job = self._submit_or_reattach(hook, body, identity)
            except (ApiException, KubernetesPermissionError, AirflowException) as exc:
                if not _refused_outright(exc):
                    raise
                if secret is not None:
                    self._withdraw_api_key(hook, secret, namespace)
                if isinstance(exc, ApiException):
                    raise AirflowException(
                        f"Kubernetes refused the Volcano job {namespace}/"
                        f"{body['metadata']['name']} (HTTP {exc.status}): {api_message(exc)}. "
                        "Nothing was submitted."
                    ) from exc
                raise
            if secret is not None:
                try:
                    hook.set_secret_owner(secret["name"], namespace, job)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    # Collected with an earlier job of this task instance while we waited for
                    # that job to go: write it again and hand it to the new job.
                    self._store_api_key(hook, body, identity, wandb_hook)
                    hook.set_secret_owner(secret["name"], namespace, job)
        except (Urllib3Error, ConnectionError) as exc:  # the hook's bounded retries gave up
            raise AirflowException(
                f"Submission failed: could not reach the Kubernetes API at "
                f"{hook.api_client.configuration.host} ({type(exc).__name__}: {exc}). If the "
                "job was created before the connection was lost, the next try finds it and "
                "reattaches; otherwise nothing was submitted."
            ) from exc
        meta = job["metadata"]
        self._submitted = {"name": meta["name"], "namespace": namespace, "uid": meta["uid"]}
        result = {**self._submitted, "wandb_run_id": spec.run_id, "wandb_run_url": spec.url}
        ti.xcom_push(key=XCOM_JOB, value=self._submitted)
        ti.xcom_push(key=XCOM_RUN_ID, value=spec.run_id)
        ti.xcom_push(key=XCOM_RUN_URL, value=spec.url)
        if spec.url:
            self.log.info("W&B run: %s", spec.url)

        status = job_status.interpret(job)
        if status.verdict is job_status.Verdict.SUCCEEDED:
            self.log.info(
                "Job %s already Completed (an earlier try); not resubmitting", meta["name"]
            )
            return self._finish(context, status.as_event(), result)
        if not self.wait_for_completion:
            return result
        trigger = self._trigger(meta["uid"])
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete")
        return self._finish(context, self._wait_here(hook, trigger, job), result)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: report, clean up, and succeed or fail."""
        ti = context["ti"]
        result = {
            **(ti.xcom_pull(task_ids=self.task_id, key=XCOM_JOB) or {}),
            "wandb_run_id": ti.xcom_pull(task_ids=self.task_id, key=XCOM_RUN_ID),
            "wandb_run_url": ti.xcom_pull(task_ids=self.task_id, key=XCOM_RUN_URL),
        }
        return self._finish(context, event, result)

    # ---- rendering -----------------------------------------------------------------------

    def _wandb_spec(self, context: Context, wandb_hook: WandbHook) -> wandb_run.WandbRunSpec:
        ti = context["ti"]
        dag_run = context["dag_run"]
        logical_date = getattr(dag_run, "logical_date", None)
        airflow_ctx = wandb_run.AirflowRunContext(
            dag_id=ti.dag_id,
            dag_run_id=ti.run_id,
            task_id=ti.task_id,
            try_number=ti.try_number,
            logical_date=logical_date.isoformat() if logical_date else None,
            task_url=getattr(ti, "log_url", None),
            map_index=ti.map_index,
        )
        try:
            return wandb_run.WandbRunSpec.for_task_instance(
                airflow_ctx,
                run_id=self.wandb_run_id,
                run_name=self.wandb_run_name,
                tags=self.wandb_tags,
                entity=self.wandb_entity or wandb_hook.entity,
                project=self.wandb_project or wandb_hook.project,
                base_url=wandb_hook.base_url,
                mode=self.wandb_mode,
                rank_mode=self.wandb_rank_mode,
                api_key_secret=self.wandb_api_key_secret,
            )
        except ValueError as exc:
            raise AirflowException(f"Invalid W&B settings: {exc}") from exc

    def _render_job(
        self,
        context: Context,
        identity: TaskInstanceIdentity,
        spec: wandb_run.WandbRunSpec,
        wandb_hook: WandbHook,
    ) -> dict[str, Any]:
        template = self.template
        if wandb_run.is_queue_ref(template):
            ref = wandb_run.parse_queue_ref(template)
            template = wandb_hook.get_queue_template(ref.entity, ref.queue)
        macros = {**wandb_run.macro_values(spec, author=self.owner), **(self.macros or {})}
        if self.image_uri is not None:
            macros["image_uri"] = self.image_uri
        try:
            body = render_job(
                template,
                macros=macros,
                replicas=self.replicas,
                env=self.env,
                resources=self.container_resources,
                command=self.command,
                args=self.args,
                labels=identity.labels(),
                annotations=identity.annotations(context["ti"].try_number),
                pod_annotations=self.pod_annotations,
                name=self.job_name,
                namespace=self.namespace,
                max_replicas=self.max_replicas,
            )
        except TemplateError as exc:
            raise AirflowException(f"Template error, nothing was submitted: {exc}") from exc
        if not body["metadata"].get("namespace"):
            body["metadata"]["namespace"] = self.hook.get_namespace() or "default"
        return body

    @staticmethod
    def _secret_name(body: Mapping[str, Any]) -> str:
        return f"{body['metadata']['name'][:50]}-wandb-key"

    def _store_api_key(
        self,
        hook: VolcanoHook,
        body: dict[str, Any],
        identity: TaskInstanceIdentity,
        wandb_hook: WandbHook,
    ) -> dict[str, Any] | None:
        """Put the connection's API key in a Secret the job's containers read it from.

        Returns the Secret's metadata as written. A Secret of that name left by an earlier try
        of this task instance gets the current key; one that belongs to anything else is never
        touched (it may hold another team's key).
        """
        if self.wandb_api_key_secret or not wandb_hook.api_key:
            return None
        name = self._secret_name(body)
        namespace = body["metadata"]["namespace"]
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "labels": identity.labels(),
                "annotations": identity.annotations(),
            },
            "type": "Opaque",
            "stringData": {"api-key": wandb_hook.api_key},
        }
        try:
            return hook.create_secret(secret, namespace)["metadata"]
        except SecretExistsError:
            existing = hook.get_secret_metadata(name, namespace)
        if existing is None:  # deleted since: ours to create after all
            return hook.create_secret(secret, namespace)["metadata"]
        if not identity.owns({"metadata": existing}):
            raise AirflowException(
                f"A Secret named {namespace}/{name} already exists and belongs to "
                f"{owner_of({'metadata': existing})}; it was left alone and nothing was "
                "submitted. Set job_name or a template name that is unique per task instance"
            )
        return hook.patch_secret_data(name, namespace, secret["stringData"])["metadata"]

    def _withdraw_api_key(
        self, hook: VolcanoHook, secret: Mapping[str, Any], namespace: str
    ) -> None:
        """No job will read the Secret this try wrote: delete it, not leave the key lying about.

        A Secret already handed to a job (an earlier try's) is the job's to delete; the
        resourceVersion precondition leaves it alone if anyone changed it meanwhile.
        """
        if secret.get("ownerReferences"):
            return
        try:
            hook.delete_secret(secret["name"], namespace, secret["resourceVersion"])
        except Exception as exc:  # the submission's own error is the one to raise
            self.log.warning(
                "Could not delete Secret %s/%s holding the W&B API key (%s); delete it by hand",
                namespace,
                secret["name"],
                exc,
            )

    # ---- submission ----------------------------------------------------------------------

    def _submit_or_reattach(
        self, hook: VolcanoHook, body: dict[str, Any], identity: TaskInstanceIdentity
    ) -> dict[str, Any]:
        namespace = body["metadata"]["namespace"]
        for existing in hook.list_jobs(namespace, identity.selector()):
            job = self._reuse_or_clear(hook, existing)
            if job is not None:
                return job
        try:
            job = hook.create_job(body, namespace)
            self.log.info("Submitted Volcano job %s/%s", namespace, job["metadata"]["name"])
            return job
        except JobExistsError:
            existing = hook.get_job(body["metadata"]["name"], namespace)
        if existing is None or not identity.owns(existing):
            raise AirflowException(
                f"A Volcano job named {namespace}/{body['metadata']['name']} already exists and "
                f"belongs to {owner_of(existing or {})}; set job_name or a template name that "
                "is unique per task instance"
            )
        # Our own create whose answer was lost, or a concurrent try: the job is ours.
        return self._reuse_or_clear(hook, existing) or hook.create_job(body, namespace)

    def _reuse_or_clear(self, hook: VolcanoHook, job: dict[str, Any]) -> dict[str, Any] | None:
        """A job this task instance already owns: reuse it, or delete it and say so."""
        status = job_status.interpret(job)
        if status.verdict is job_status.Verdict.DELETED:
            # Being deleted (a kill or clear of an earlier try): reattaching would only see it
            # vanish. Let it go, then submit afresh.
            self.log.info(
                "Earlier job %s/%s is being deleted; waiting for it to go before resubmitting",
                status.namespace,
                status.name,
            )
            hook.wait_job_gone(status.name, status.namespace)
            return None
        if status.verdict is job_status.Verdict.SUCCEEDED:
            return job
        if not status.terminal and self.reattach_on_restart:
            self.log.info(
                "Reattaching to running Volcano job %s/%s (%s)",
                status.namespace,
                status.name,
                status.progress(),
            )
            return job
        self.log.info(
            "Deleting this task instance's earlier job %s/%s (%s) before resubmitting",
            status.namespace,
            status.name,
            status.phase or "no phase",
        )
        hook.delete_job(status.name, status.namespace, uid=status.uid)
        hook.wait_job_gone(status.name, status.namespace)
        return None

    # ---- waiting -------------------------------------------------------------------------

    def _trigger(self, uid: str) -> VolcanoJobTrigger:
        assert self._submitted is not None
        deadline = None
        if self.execution_timeout is not None:
            deadline = time.time() + self.execution_timeout.total_seconds()
        return VolcanoJobTrigger(
            job_name=self._submitted["name"],
            namespace=self._submitted["namespace"],
            job_uid=uid,
            **self.connection_kwargs(),
            pending_timeout=self.pending_timeout,
            deadline=deadline,
            poll_interval=self.poll_interval,
        )

    def _wait_here(
        self, hook: VolcanoHook, trigger: VolcanoJobTrigger, job: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Sync mode: the same watch the trigger uses, run here, with the master log streamed."""
        trigger._log = self.log  # progress lines belong in the task log
        follower = MasterLogFollower(
            hook,
            job["metadata"]["name"],
            job["metadata"]["namespace"],
            master_task_name(job) or "master",
            self.log,
        )
        follower.start()
        try:
            return asyncio.run(_first_event(trigger))
        except BaseException:
            # execution_timeout (AirflowTaskTimeout), a kill, or any failure while waiting:
            # the job must not keep running without anyone waiting for it.
            self._delete_quietly(hook)
            raise
        finally:
            follower.stop()

    # ---- finishing -----------------------------------------------------------------------

    def _finish(
        self, context: Context, event: dict[str, Any], result: dict[str, Any]
    ) -> dict[str, Any]:
        self._submitted = {k: event[k] for k in ("name", "namespace", "uid")}
        hook = self.hook
        outcome = event["status"]
        if outcome == "succeeded":
            self.log.info("%s", event["message"])
            if self.deferrable:
                self._log_master_tail(hook)
            if self.wandb_summary_keys:
                summary = self._read_summary(result)
                context["ti"].xcom_push(key=XCOM_SUMMARY, value=summary)
                result = {**result, "wandb_summary": summary}
            if self.on_finish_action in ("delete", "delete_succeeded"):
                hook.delete_job(event["name"], event["namespace"], uid=event["uid"])
            return {**result, "phase": event["phase"]}

        if outcome == "timeout":
            self._delete_quietly(hook)
            raise AirflowTaskTimeout(event["message"])
        message = hook.explain_end(event, self.log_lines, self.log)
        # Pending too long, or nobody can wait on it (the watch was refused): it goes.
        if outcome in ("pending_timeout", "error") or self.on_finish_action == "delete":
            self._delete_quietly(hook)
        raise AirflowException(message)

    def _read_summary(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """The requested W&B summary metrics; empty when the run is offline or unreachable."""
        if self.wandb_mode in ("offline", "disabled"):
            self.log.warning("W&B mode is %s: no summary to read back", self.wandb_mode)
            return {}
        return self.wandb_hook.get_run_summary(
            result["wandb_run_id"],
            entity=self.wandb_entity,
            project=self.wandb_project,
            keys=self.wandb_summary_keys,
        )

    def _log_master_tail(self, hook: VolcanoHook) -> None:
        """Deferrable mode streams nothing while waiting: show the master's last lines now."""
        assert self._submitted is not None
        name, namespace = self._submitted["name"], self._submitted["namespace"]
        job = hook.get_job(name, namespace)
        master = (master_task_name(job) if job else None) or "master"
        for pod in hook.list_job_pods(name, namespace):
            if task_of(pod) == master:
                pod_name = pod["metadata"]["name"]
                log = hook.read_pod_log(pod_name, namespace, self.log_lines)
                for line in log.splitlines():
                    self.log.info("[%s] %s", pod_name, line)

    def _delete_quietly(self, hook: VolcanoHook) -> None:
        if not self._submitted:
            return
        try:
            if hook.delete_job(
                self._submitted["name"], self._submitted["namespace"], uid=self._submitted["uid"]
            ):
                self.log.info(
                    "Deleted Volcano job %s/%s",
                    self._submitted["namespace"],
                    self._submitted["name"],
                )
        except Exception:
            self.log.exception("Could not delete Volcano job %s", self._submitted["name"])

    def on_kill(self) -> None:
        """The task was killed while waiting in sync mode: delete the job and its pods."""
        self._delete_quietly(self.hook)


def _refused_outright(exc: BaseException) -> bool:
    """The apiserver (or the job's owner check) said no: no job was created by this try.

    Timeouts, throttling and 5xx are not: the create may have been applied with its answer
    lost, and the next try reattaches to that job and its Secret.
    """
    if isinstance(exc, ApiException):
        return 400 <= exc.status < 500 and exc.status not in (*RETRYABLE_STATUSES, 409)
    if isinstance(exc, AirflowTaskTimeout):  # cut short mid-call: the create may be applied
        return False
    return isinstance(exc, KubernetesPermissionError | AirflowException)


async def _first_event(trigger: VolcanoJobTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AirflowException("The wait on the Volcano job ended without a result")


def add_wandb_env(job: dict[str, Any], spec: wandb_run.WandbRunSpec) -> None:
    """Give every container of every task the run's env; the master task owns the run.

    The run's identity is the provider's to set, so these entries replace a template's own
    (a template's WANDB_RUN_ID would make ranks disagree about which run they write to).
    """
    master = master_task_name(job)
    for task in job["spec"]["tasks"]:
        apply_env([task], wandb_run.container_env(spec, is_master_task=task["name"] == master))
