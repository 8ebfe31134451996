"""What the operator's job is: the queue template, what fills it, and the policy it must meet.

Rendering itself is the pure ``template`` package; this part holds the options and hands
them to ``render_job`` with the run's macros and env. An option ``render_job`` takes as it is
is ``rendered(keyword)``: its default and doc are the keyword's declaration in ``template/``;
here it says only how Airflow templates it, and the operator's word where it adds one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.airflow_compat import AirflowException, conf
from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.job import fit
from airflow_volcano_wandb.job.fit_check import check_fit
from airflow_volcano_wandb.job.queue_template import template_and_schemas
from airflow_volcano_wandb.job.volcano_target import configured_volcano_version
from airflow_volcano_wandb.parts.options import REQUIRED, option, render_kwargs, rendered
from airflow_volcano_wandb.template import RunEnv, TemplateError, render_job
from airflow_volcano_wandb.template.macros import macros_from_env_names
from airflow_volcano_wandb.wandb import wandb_run
from airflow_volcano_wandb.wandb.wandb_env import container_env, macro_values
from airflow_volcano_wandb.wandb.wandb_queue_ref import is_queue_ref

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

DEFAULT_FINISHED_JOB_TTL = 7 * 24 * 3600


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    """The Volcano job a task renders: its placement, the run's overrides, the pod policy,
    its shaping and its checkpoints.

    Two template layers apply, in this order. First Airflow renders ``{{ }}`` Jinja in the
    templated options when the task runs (``params``, ``ds``, XComs...). Then the queue
    template's own ``${ }`` run macros are filled (``${image_uri}``, ``${run_id}``,
    ``${run_name}``, ``${entity_name}``, ``${project_name}``, ``${author}`` and ``macros``),
    structurally: a value never becomes YAML, so it cannot add fields.
    """

    # What the job is, and where it lands.
    template: str | Mapping[str, Any] = option(
        REQUIRED,
        """the queue template: a path to ``.yaml``/``.yml``/``.json`` (resolved in
        the DAG folder too), YAML or JSON text, a dict, a W&B queue config
        (``{"resource_args": {"kubernetes": ...}}``), or ``wandb-queue://<entity>/<queue>`` to
        read it from a W&B Launch queue.""",
        templated=True,
        renderer="yaml",
    )
    image_uri: str | None = option(
        None, "the training image, the ``${image_uri}`` macro.", templated=True
    )
    replicas: Mapping[str, int | str] | None = rendered("replicas", typed=True, renderer="json")
    macros: Mapping[str, Any] | None = option(
        None,
        "further ``${name}`` values, or overrides of the built-ins.",
        typed=True,
        renderer="json",
    )
    macros_from_env: Sequence[str] | None = option(
        None,
        """names (not patterns) of ``${NAME}`` macros filled from the environment of
        the process that renders the job (the worker), as W&B's agent fills them from its
        own; ``macros`` wins. Nothing else of the environment reaches the job, and errors
        name macros, never values. ``None``: ``[volcano_wandb] macros_from_env``. See
        docs/templates.md.""",
        check=macros_from_env_names,
    )
    template_variables: Mapping[str, Any] | None = rendered(
        "template_variables", typed=True, renderer="json"
    )
    template_variable_schemas: Sequence[Mapping[str, Any] | str] | None = option(
        None,
        """the guardrails of ``template_variables``, as
        ``wandb.Api().run_queue(...).template_variables`` returns them (``[{"name",
        "schema"}]``, each schema a dict or JSON text). A ``wandb-queue://`` template's come
        from its queue and may not be given here. With schemas, Airflow's Jinja leaves the
        template itself alone, so its ``{{name}}`` reach W&B's rules. Not templated: nothing
        a run supplies can widen them.""",
    )
    run_config: Mapping[str, Any] | None = rendered("run_config", typed=True, renderer="json")
    job_name: str | None = option(
        None,
        """the job's name; by default the template's (the seed's
        ``wandb-job-${run_id}`` is deterministic per submission). A fixed name is reused by
        every try: a retry replaces the job an earlier try of this task instance reported
        (deleted, confirmed gone, then created again); a job of that name that belongs to
        another task instance or deployment is never touched (the task fails naming it).""",
        templated=True,
        render="name",
    )
    volcano_queue: str | None = option(
        None,
        """the Volcano queue (``spec.queue``); by default the template's.
        (``queue`` is Airflow's own: the executor queue the task runs in.)""",
        templated=True,
        render="queue",
    )
    # The run's overrides of the template.
    env: Mapping[str, str] | None = rendered("env", templated=True)
    container_resources: Mapping[str, Any] | None = option(
        None,
        """container resources per task name, e.g.
        ``{"worker": {"limits": {"nvidia.com/gpu": 8}}}`` (``resources`` is taken by
        Airflow).""",
        typed=True,
        render="resources",
    )
    command: Mapping[str, list[str]] | None = rendered("command", templated=True)
    args: Mapping[str, list[str]] | None = rendered("args", templated=True)
    pod_annotations: Mapping[str, str] | None = rendered("pod_annotations", templated=True)
    service_account: str | None = rendered("service_account", templated=True)
    # Its shaping.
    add_master_policy: bool = rendered("add_master_policy")
    gang: str = rendered("gang")
    elastic: tuple[int, int] | bool | None = rendered("elastic", typed=True, renderer="json")
    shm_size: str | None = rendered("shm_size")
    max_replicas: int = rendered("max_replicas")
    volcano_version: str | None = option(
        None,
        """the Volcano release the cluster runs (``v1.12.2``): the job names
        only plugins it has (before v1.12.3, no ``hcclrank``, so no ``PET_NODE_RANK``).
        ``None``: ``[volcano_wandb] volcano_version``, by default the release the provider is
        tested with. See docs/templates.md.""",
    )
    finished_job_ttl: int | None = option(
        DEFAULT_FINISHED_JOB_TTL,
        """seconds a finished job may stay before Volcano deletes it
        (``spec.ttlSecondsAfterFinished``, unless the template sets one); default 7 days, so
        kept jobs and their Secrets do not pile up. ``None``: no limit.""",
    )
    # The policy it must meet.
    pod_security: str = rendered("pod_security")
    allowed_images: Sequence[str] | None = rendered("allowed_images")
    allowed_namespaces: Sequence[str] | None = rendered("allowed_namespaces")
    allowed_service_accounts: Sequence[str] | None = rendered("allowed_service_accounts")
    allowed_secrets: Sequence[str] | None = rendered("allowed_secrets")
    allowed_schedulers: Sequence[str] | None = rendered("allowed_schedulers")
    allowed_queues: Sequence[str] | None = rendered("allowed_queues")
    allowed_priority_classes: Sequence[str] | None = rendered("allowed_priority_classes")
    max_total_gpus: int | None = rendered("max_total_gpus", templated=True)
    fit_check: str = option(
        "fail",
        """before the job is created, compare its gang (every rank's GPUs, CPU and
        memory requests) with its Volcano queue's ``capability``, ``deserved`` and
        ``allocated`` and with the nodes' allocatable resources. ``fail`` (default): a job
        that can never be placed (more than the queue's cap, a pod larger than every node, a
        gang larger than all nodes together) fails at once with ``JobWontFitError``, nothing
        submitted; ``warn``: that is only logged and the job is submitted (an autoscaled
        cluster may yet add the nodes; a queue's cap stays a cap, so the job will pend until
        ``pending_timeout``); ``off``: nothing is read. Either way a job that fits but not now
        (its queue's capacity in use) is logged and waited for. Queues and nodes are
        cluster-scoped: without the optional ClusterRole of docker/k8s/rbac-fit-check.yaml
        the task log says once what was skipped. See docs/operator.md.""",
        check=fit.check_mode,
    )
    # Its checkpoints.
    checkpoint_volume: str | None = rendered("checkpoint_volume", templated=True)
    checkpoint_artifact: bool = rendered("checkpoint_artifact")
    checkpoint_grace: int | None = rendered("checkpoint_grace")
    #: The DAG's owner: the ``${author}`` macro.
    owner: str = ""
    log: Any = None

    def render(
        self,
        spec: wandb_run.WandbRunSpec,
        wandb_hook: WandbHook,
        *,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        pod_labels: Mapping[str, str],
        namespace: str | None,
        default_namespace: Callable[[], str | None],
        name: str | None = None,
    ) -> dict[str, Any]:
        """The Volcano Job for the run ``spec``; any bad input fails here, before submission.

        :param namespace: the ``namespace`` option (``Connection``'s).
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
            template, schemas = template_and_schemas(
                self.template, self.template_variable_schemas, wandb_hook
            )
            body = render_job(
                template,
                macros=macros,
                macros_from_env=configured_macros_from_env(self.macros_from_env),
                template_variable_schemas=schemas,
                **{**render_kwargs(self), **({"name": name} if name else {})},
                labels=labels,
                annotations=annotations,
                pod_labels=pod_labels,
                namespace=namespace,
                template_namespace_allowed=not from_queue,
                volcano_version=self.volcano_version or configured_volcano_version(),
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


def configured_macros_from_env(given: Sequence[str] | None) -> Sequence[str] | None:
    """``given``, else ``[volcano_wandb] macros_from_env`` (comma-separated names)."""
    if given is not None:
        return given
    configured = conf.get("volcano_wandb", "macros_from_env", fallback="") or ""
    return [name.strip() for name in configured.split(",") if name.strip()]
