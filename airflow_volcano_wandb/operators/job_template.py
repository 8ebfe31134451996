"""What the operator's job is: the queue template, what fills it, and the policy it must meet.

Rendering itself is the pure ``template`` module; this base holds the parameters and hands
them to ``render_job`` with the run's macros and env.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.job import fit
from airflow_volcano_wandb.job.fit_check import check_fit
from airflow_volcano_wandb.job.volcano_target import configured_volcano_version
from airflow_volcano_wandb.template import (
    DEFAULT_ALLOWED_SCHEDULERS,
    DEFAULT_SHM_SIZE,
    RunEnv,
    TemplateError,
    render_job,
)
from airflow_volcano_wandb.wandb import wandb_run
from airflow_volcano_wandb.wandb.wandb_env import container_env, macro_values
from airflow_volcano_wandb.wandb.wandb_queue_ref import is_queue_ref

DEFAULT_FINISHED_JOB_TTL = 7 * 24 * 3600


class JobTemplateMixin(BaseOperator):
    """Parameters of the Volcano job a task renders, and the rendering step.

    Two template layers apply, in this order. First Airflow renders ``{{ }}`` Jinja in the
    templated fields when the task runs (``params``, ``ds``, XComs...). Then the queue
    template's own ``${ }`` run macros are filled (``${image_uri}``, ``${run_id}``,
    ``${run_name}``, ``${entity_name}``, ``${project_name}``, ``${author}`` and ``macros``),
    structurally: a value never becomes YAML, so it cannot add fields.

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
        ``wandb-job-${run_id}`` is deterministic per submission). A fixed name is reused by
        every try: a retry replaces the job an earlier try of this task instance reported
        (deleted, confirmed gone, then created again); a job of that name that belongs to
        another task instance or deployment is never touched (the task fails naming it).
    :param volcano_queue: the Volcano queue (``spec.queue``); by default the template's.
        (``queue`` is Airflow's own: the executor queue the task runs in.)
    :param add_master_policy: give the ``pytorch`` plugin's master task
        ``TaskCompleted -> CompleteJob`` when the template lacks it.
    :param gang: ``all_ranks`` (default): a PyTorch job's ``minAvailable`` is raised to its
        world size, so no rank holds GPUs before every rank can run; ``template`` keeps the
        template's value (elastic trainers).
    :param shm_size: size of the memory-backed ``/dev/shm`` every container of the ``pytorch``
        plugin's tasks gets (the runtime's 64 MiB default breaks DataLoader workers and
        NCCL); ``None``: no volume. See docs/templates.md.
    :param pod_security: the Pod Security Standards level every pod must meet:
        ``baseline`` (default), ``restricted`` or ``privileged`` (no check). See
        docs/security.md.
    :param allowed_images: fnmatch patterns every rendered image must match (for images
        typed into the Trigger form); ``None`` allows any.
    :param allowed_namespaces: namespaces the job may land in; ``None`` allows any.
    :param service_account: the pods' ``serviceAccountName``; a template may name another
        only when it is in ``allowed_service_accounts``.
    :param allowed_service_accounts: service accounts a template may name.
    :param allowed_secrets: Secrets a template (or ``env``) may name, by exact name, in env,
        ``envFrom``, volumes or ``imagePullSecrets``; by default none but the run's own key
        Secret (or ``wandb_api_key_secret``). A pod can read any Secret it names, whatever its
        service account may do; see docs/security.md.
    :param allowed_schedulers: ``schedulerName`` values the job and its pods may have; by
        default only ``volcano`` (another scheduler escapes the gang and the queue's quota).
        ``None`` allows any.
    :param allowed_queues: Volcano queues the job may land in (``default`` when it names
        none); ``None`` allows any.
    :param allowed_priority_classes: ``priorityClassName`` values the job and its pods may
        have; ``None`` allows any.
    :param max_replicas: the largest replica count accepted for a task.
    :param max_total_gpus: the most GPUs the whole gang may ask for (replicas times each
        pod's ``<vendor>/gpu`` limits, over every task): a cap on what a Trigger form's
        replicas and GPUs per worker can add up to; refused before anything is submitted.
        ``None``: no cap. Templated, so a form or a Variable may set it.
    :param finished_job_ttl: seconds a finished job may stay before Volcano deletes it
        (``spec.ttlSecondsAfterFinished``, unless the template sets one); default 7 days, so
        kept jobs and their Secrets do not pile up. ``None``: no limit.
    :param volcano_version: the Volcano release the cluster runs (``v1.12.2``): the job names
        only plugins it has (before v1.12.3, no ``hcclrank``, so no ``PET_NODE_RANK``).
        ``None``: ``[volcano_wandb] volcano_version``, by default the release the provider is
        tested with. See docs/templates.md.
    :param fit_check: before the job is created, compare its gang (every rank's GPUs, CPU and
        memory requests) with its Volcano queue's ``capability``, ``deserved`` and
        ``allocated`` and with the nodes' allocatable resources. ``fail`` (default): a job
        that can never be placed (more than the queue's cap, a pod larger than every node, a
        gang larger than all nodes together) fails at once with ``JobWontFitError``, nothing
        submitted; ``warn``: that is only logged and the job is submitted (an autoscaled
        cluster may yet add the nodes; a queue's cap stays a cap, so the job will pend until
        ``pending_timeout``); ``off``: nothing is read. Either way a job that fits but not now
        (its queue's capacity in use) is logged and waited for. Queues and nodes are
        cluster-scoped: without the optional ClusterRole of docker/k8s/rbac-fit-check.yaml
        the task log says once what was skipped. See docs/operator.md.
    :param checkpoint_volume: the name of a PersistentVolumeClaim in the job's namespace
        where the trainer keeps its checkpoints (docs/trainer.md, "Checkpoints"): mounted at
        ``/checkpoints`` in every task's main container, with
        ``AVW_CHECKPOINT_DIR=/checkpoints/<W&B run id>`` (one directory per run) and
        ``AVW_RESUME_FROM=latest``, so a restarted pod continues from the newest complete
        checkpoint of its run. Every rank must see the same files: a ``ReadWriteMany`` claim
        for a job over several nodes. ``None`` (default): no checkpoints. Templated.
    :param checkpoint_artifact: keep the checkpoints in the run's W&B artifact,
        ``checkpoint-<W&B run id>`` (``AVW_CHECKPOINT_ARTIFACT``; a version per save), for a
        cluster with no ``ReadWriteMany`` volume: a resumed try downloads its newest version.
        Without ``checkpoint_volume``, ``/checkpoints`` is each pod's own ``emptyDir``. Needs
        an online W&B run (not ``wandb_mode`` ``offline`` or ``disabled``). Default False.
    :param checkpoint_grace: seconds a deleted pod has to finish its step and save a
        checkpoint before it is killed (every pod's ``terminationGracePeriodSeconds``);
        ``None``: the template's, else Kubernetes' 30.
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
        "pod_annotations",
        "max_total_gpus",
        "checkpoint_volume",
    )
    template_ext: Sequence[str] = (".yaml", ".yml", ".json")
    template_fields_renderers = {"template": "yaml", "macros": "json", "replicas": "json"}

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
        shm_size: str | None = DEFAULT_SHM_SIZE,
        pod_security: str = "baseline",
        allowed_images: Sequence[str] | None = None,
        allowed_namespaces: Sequence[str] | None = None,
        service_account: str | None = None,
        allowed_service_accounts: Sequence[str] | None = None,
        allowed_secrets: Sequence[str] | None = None,
        allowed_schedulers: Sequence[str] | None = DEFAULT_ALLOWED_SCHEDULERS,
        allowed_queues: Sequence[str] | None = None,
        allowed_priority_classes: Sequence[str] | None = None,
        max_replicas: int = 1024,
        max_total_gpus: int | None = None,
        finished_job_ttl: int | None = DEFAULT_FINISHED_JOB_TTL,
        volcano_version: str | None = None,
        fit_check: str = "fail",
        checkpoint_volume: str | None = None,
        checkpoint_artifact: bool = False,
        checkpoint_grace: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.template, self.image_uri, self.replicas = template, image_uri, replicas
        self.macros, self.namespace, self.env = macros, namespace, env
        self.container_resources, self.command, self.args = container_resources, command, args
        self.pod_annotations, self.job_name = pod_annotations, job_name
        self.volcano_queue = volcano_queue
        self.add_master_policy, self.pod_security = add_master_policy, pod_security
        self.gang, self.shm_size = gang, shm_size
        self.allowed_images, self.allowed_namespaces = allowed_images, allowed_namespaces
        self.service_account = service_account
        self.allowed_service_accounts = allowed_service_accounts
        self.allowed_secrets, self.allowed_schedulers = allowed_secrets, allowed_schedulers
        self.allowed_queues = allowed_queues
        self.allowed_priority_classes = allowed_priority_classes
        self.max_replicas, self.finished_job_ttl = max_replicas, finished_job_ttl
        self.max_total_gpus = max_total_gpus
        self.volcano_version = volcano_version
        fit.check_mode(fit_check)
        self.fit_check = fit_check
        self.checkpoint_volume, self.checkpoint_grace = checkpoint_volume, checkpoint_grace
        self.checkpoint_artifact = checkpoint_artifact

    def render(
        self,
        spec: wandb_run.WandbRunSpec,
        wandb_hook: WandbHook,
        *,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        default_namespace: Callable[[], str | None],
        name: str | None = None,
    ) -> dict[str, Any]:
        """The Volcano Job for the run ``spec``; any bad input fails here, before submission.

        :param name: the job's name, over ``job_name`` and the template's.
        """
        macros = {**macro_values(spec, author=self.owner), **(self.macros or {})}
        if self.image_uri is not None:
            macros["image_uri"] = self.image_uri
        # A template from the DAG is its author's, like namespace=; a W&B queue's is edited by
        # people outside the Airflow team, so its namespace must be allow-listed.
        from_queue = is_queue_ref(self.template)
        if self.checkpoint_artifact and spec.mode in ("offline", "disabled"):
            raise AirflowException(
                f"checkpoint_artifact needs an online W&B run to keep the checkpoints in, but "
                f"wandb_mode is {spec.mode!r}. Nothing was submitted."
            )
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
                labels=labels,
                annotations=annotations,
                pod_annotations=self.pod_annotations,
                name=name or self.job_name,
                namespace=self.namespace,
                queue=self.volcano_queue,
                add_master_policy=self.add_master_policy,
                max_replicas=self.max_replicas,
                gang=self.gang,
                shm_size=self.shm_size,
                pod_security=self.pod_security,
                allowed_images=self.allowed_images,
                allowed_namespaces=self.allowed_namespaces,
                template_namespace_allowed=not from_queue,
                service_account=self.service_account,
                allowed_service_accounts=self.allowed_service_accounts,
                allowed_secrets=self.allowed_secrets,
                allowed_schedulers=self.allowed_schedulers,
                allowed_queues=self.allowed_queues,
                allowed_priority_classes=self.allowed_priority_classes,
                max_total_gpus=self.max_total_gpus,
                volcano_version=self.volcano_version or configured_volcano_version(),
                checkpoint_volume=self.checkpoint_volume,
                checkpoint_artifact=self.checkpoint_artifact,
                checkpoint_grace=self.checkpoint_grace,
                run_env=RunEnv(
                    master=container_env(spec, is_master_task=True),
                    others=container_env(spec, is_master_task=False),
                ),
            )
        except (TemplateError, ValueError) as exc:
            raise AirflowException(f"Template error, nothing was submitted: {exc}") from exc
        if not body["metadata"].get("namespace"):
            body["metadata"]["namespace"] = default_namespace() or "default"
        if self.finished_job_ttl is not None:
            body["spec"].setdefault("ttlSecondsAfterFinished", int(self.finished_job_ttl))
        return body

    def fit_checked(self, body: Mapping[str, Any]) -> Callable[[VolcanoHook], None]:
        """Judge once, with the submission's hook, whether ``body`` fits (``fit_check``). The
        submission calls it right before a create, so a reattached job is never judged (the
        queue's ``allocated`` would count the job itself)."""
        judged = False

        def check(hook: VolcanoHook) -> None:
            nonlocal judged
            if not judged:
                check_fit(hook, body, self.fit_check, self.log)
                judged = True

        return check
