"""Render a W&B Launch queue template into the Volcano Job one run submits.

Pure: no Airflow, no HTTP, no Kubernetes client. :func:`render_job` is the whole API; the
stages live in :mod:`airflow_volcano_wandb.template`, one concept per module:

1. ``load``: path, YAML/JSON string, dict or W&B queue config -> the Job mapping.
1b. ``template_variables``: W&B Launch's ``{{name}}``, checked against the queue's schemas
    and filled in, structurally (only when there are schemas).
2. ``macros``: a fresh copy with ``${name}`` filled in, structurally (``macros_from_env``:
   the listed names from this process's environment).
3. ``normalize``: typed values in string-only fields become text; counts become ints.
4. ``overrides``: this run's replicas, image, env, resources, command/args, metadata;
   ``guardrails`` holds each to the schema of a template variable that fills what it changes.
4b. ``run_config``: the run's config as W&B Launch's env on every task's main container.
5. ``checkpoints``: a volume for the trainer's checkpoints, its mount and the contract's env in
   every task's main container, and the pods' grace period.
6. ``gang``: ``minAvailable`` follows the new replica counts where it meant "all".
7. ``volcano``: the master-policy contract of the ``pytorch`` plugin.
8. ``naming``: a valid, deterministic job name that leaves room for pod names.
9. ``torchrun``: the ``PET_*`` env ``torchrun`` reads, and a memory-backed ``/dev/shm``, on
   the ``pytorch`` plugin's ranks (after naming: the master's address uses the job name).
10. ``validate``: everything Volcano would reject, reported with JSON paths.
11. ``policy``: what this deployment refuses (``pod_security``: the Pod Security Standards;
    ``allow_lists``: images, namespace, service accounts, scheduler, Volcano queue, priority
    classes; ``secret_refs``: the Secrets pods name), reported together with JSON paths.

See ``docs/templates.md`` for the rules with examples.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple, Union

from airflow_volcano_wandb.template import gang as gang_sizes
from airflow_volcano_wandb.template import naming, overrides, secret_refs, torchrun, volcano
from airflow_volcano_wandb.template.checkpoints import Checkpoints
from airflow_volcano_wandb.template.errors import errors_at
from airflow_volcano_wandb.template.guardrails import Guardrails
from airflow_volcano_wandb.template.load import load_template as _load
from airflow_volcano_wandb.template.macros import macros_from_env_names, substitute
from airflow_volcano_wandb.template.normalize import normalize
from airflow_volcano_wandb.template.placement import Placement
from airflow_volcano_wandb.template.pod_security import DEFAULT_LEVEL, LEVELS
from airflow_volcano_wandb.template.policy import Policy
from airflow_volcano_wandb.template.run_config import apply_run_config
from airflow_volcano_wandb.template.shaping import DEFAULT_SCHEDULER_NAME, Shaping
from airflow_volcano_wandb.template.structure import check_shape
from airflow_volcano_wandb.template.template_variables import render_variables
from airflow_volcano_wandb.template.validate import validate
from airflow_volcano_wandb.template.values import copy_json
from airflow_volcano_wandb.versions import VOLCANO_VERSION

DEFAULT_MAX_REPLICAS = naming.DEFAULT_MAX_REPLICAS
#: Only Volcano's scheduler keeps the gang together and the job inside its queue's quota.
DEFAULT_ALLOWED_SCHEDULERS = (DEFAULT_SCHEDULER_NAME,)
DEFAULT_SHM_SIZE = torchrun.DEFAULT_SHM_SIZE
DEFAULT_POD_SECURITY = DEFAULT_LEVEL
POD_SECURITY_LEVELS = LEVELS
#: The Volcano release jobs are rendered for unless told: the one the local cluster builds.
DEFAULT_VOLCANO_VERSION = VOLCANO_VERSION

#: What a template may be given as (see :func:`render_job`).
TemplateSource = Union[str, bytes, "os.PathLike[str]", Mapping[str, Any]]


class RunEnv(NamedTuple):
    """Env the provider owns (the W&B run's identity): applied after ``env``, so it wins.

    The master task (see :func:`master_task_name`) gets ``master``; every other task
    ``others``. Each is ``{name: value}`` or a list of ``{"name", "value"|"valueFrom"}``.
    """

    master: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    others: Mapping[str, Any] | Sequence[Mapping[str, Any]]


def load_template(template: TemplateSource) -> dict[str, Any]:
    """Load a template without rendering it: a fresh copy of the Volcano Job, macros intact.

    Useful to show a template or read its task names before a run has values for its macros.
    """
    return copy_json(_load(template), (), "template")


def master_task_name(job: Mapping[str, Any]) -> str | None:
    """The task that plays master in a (rendered) job: the ``--master`` task of its ``pytorch``
    or ``mpi`` plugin (default ``master``) when that task exists, else the first task; ``None``
    when the job has no named tasks. The operator gives this task ownership of the W&B run."""
    spec = job.get("spec") if isinstance(job, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(spec.get("tasks"), list):
        return None
    names = [
        t["name"]
        for t in spec["tasks"]
        if isinstance(t, Mapping) and isinstance(t.get("name"), str)
    ]
    plugins = spec.get("plugins")
    for plugin in volcano.ROLE_PLUGINS:
        arguments = plugins.get(plugin) if isinstance(plugins, Mapping) else None
        if isinstance(arguments, list):
            master = volcano.plugin_roles(arguments)[0]["master"]
            if master in names:
                return master
    return names[0] if names else None


def _run_env_secrets(run_env: RunEnv | None) -> frozenset[str]:
    if run_env is None:
        return frozenset()
    return secret_refs.env_secret_names(run_env.master) | secret_refs.env_secret_names(
        run_env.others
    )


def _apply_run_env(job: dict[str, Any], tasks: list[dict[str, Any]], run_env: RunEnv) -> None:
    master = master_task_name(job)
    for task in tasks:
        overrides.apply_env([task], run_env.master if task["name"] == master else run_env.others)


def render_job(
    template: TemplateSource,
    *,
    macros: Mapping[str, Any],
    macros_from_env: Sequence[str] | None = None,
    replicas: Mapping[str, int | str] | None = None,
    image: str | Mapping[str, str] | None = None,
    env: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    resources: Mapping[str, Mapping[str, Any]] | None = None,
    command: Mapping[str, Sequence[Any]] | None = None,
    args: Mapping[str, Sequence[Any]] | None = None,
    labels: Mapping[str, Any] | None = None,
    annotations: Mapping[str, Any] | None = None,
    pod_labels: Mapping[str, Any] | None = None,
    pod_annotations: Mapping[str, Any] | None = None,
    namespace: str | None = None,
    name: str | None = None,
    queue: str | None = None,
    add_master_policy: bool = True,
    max_replicas: int = DEFAULT_MAX_REPLICAS,
    run_env: RunEnv | None = None,
    gang: str = "all_ranks",
    pod_security: str = DEFAULT_POD_SECURITY,
    allowed_images: Sequence[str] | None = None,
    allowed_namespaces: Sequence[str] | None = None,
    template_namespace_allowed: bool = False,
    service_account: str | None = None,
    allowed_service_accounts: Collection[str] | None = None,
    torchrun_env: bool = True,
    shm_size: str | None = DEFAULT_SHM_SIZE,
    allowed_secrets: Collection[str] | None = None,
    allowed_schedulers: Collection[str] | None = DEFAULT_ALLOWED_SCHEDULERS,
    allowed_queues: Collection[str] | None = None,
    allowed_priority_classes: Collection[str] | None = None,
    max_total_gpus: int | None = None,
    volcano_version: str = DEFAULT_VOLCANO_VERSION,
    checkpoint_volume: str | None = None,
    checkpoint_artifact: bool = False,
    checkpoint_grace: int | None = None,
    template_variables: Mapping[str, Any] | None = None,
    template_variable_schemas: Sequence[Mapping[str, Any] | str] | None = None,
    run_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Turn a queue template and this run's values into the Volcano Job to submit.

    :param template: a ``Path`` or one-line ``str`` naming a ``.yaml``/``.yml``/``.json`` file,
        a YAML or JSON string, or a mapping (never modified); any of them may be a W&B
        queue config ``{"resource_args": {"kubernetes": <job>}}``.
    :param macros: values for ``${name}``: the built-ins (:data:`BUILTIN_MACROS`) and any others.
        A string that is exactly ``${name}`` takes the value with its type; inside a
        longer string it is formatted as text (``true``/``false``, digits, float repr).
        ``$${name}`` gives a literal ``${name}``.
    :param macros_from_env: names (not patterns) of macros filled from this process's
        environment, as W&B's agent fills any ``${NAME}`` from its own; ``macros`` wins. Any
        other unknown macro is an error that names this option; errors never show a value.
    :param replicas: task name -> replicas (int or digit string), 0..``max_replicas``.
    :param image: one image for every container of every task, or task name -> image for the
        task's main container (the one named like the task, else the first).
    :param env: ``{name: value}`` or a list of ``{"name", "value"|"valueFrom"}`` merged by name
        into every container (not init containers); the override wins. Numbers and
        booleans are formatted as text.
    :param resources: task name -> ``{"limits": {...}, "requests": {...}}`` merged per resource
        into the main container; a ``None`` quantity removes the resource.
    :param command: task name -> list, replacing the main container's command.
    :param args: task name -> list, replacing the main container's args.
    :param labels: merged into the job's labels (override wins).
    :param annotations: merged into the job's annotations (override wins).
    :param pod_labels: merged into every task's pod template labels.
    :param pod_annotations: merged into every task's pod template annotations.
    :param namespace: replaces ``metadata.namespace``. Without it, a namespace the template
        sets is an error unless ``template_namespace_allowed`` or ``allowed_namespaces`` is
        given.
    :param name: replaces ``metadata.name``. The name, like the template's, is made valid if
        it is not (see :func:`naming.fit_job_name`), so read the final name from the result.
    :param queue: replaces ``spec.queue``.
    :param add_master_policy: when the ``pytorch`` plugin is used, give its master task
        ``TaskCompleted -> CompleteJob`` if missing, so the job completes with the master.
    :param max_replicas: upper bound for any task's replicas; also sizes the pod-name budget.
    :param run_env: env the provider owns, per master/other task (:class:`RunEnv`); merged
        last, so a template's or ``env``'s entry of the same name is replaced.
    :param gang: ``all_ranks`` (default) raises ``spec.minAvailable`` of a ``pytorch``-plugin
        job to its world size (master and worker replicas), so no rank starts before all
        can; ``template`` keeps the template's value (for elastic trainers).
    :param pod_security: the Pod Security Standards level every pod template must meet:
        ``privileged`` (no checks), ``baseline`` or ``restricted``.
    :param allowed_images: fnmatch patterns (``registry.example.com/team/*``); every rendered
        container image, init and ephemeral containers too, must match one. ``None``:
        any image.
    :param allowed_namespaces: exact names; the final namespace must be one of them, and a
        template namespace on the list is honoured. ``None``: no list.
    :param template_namespace_allowed: honour the template's ``metadata.namespace`` when no
        ``namespace`` is given, even without ``allowed_namespaces``.
    :param service_account: set ``serviceAccountName`` on every pod template (and drop the
        deprecated ``serviceAccount``).
    :param allowed_service_accounts: the accounts pod templates may name. ``None``: only
        ``service_account``, so with neither, a template may not name an account.
    :param torchrun_env: give every container of the ``pytorch`` plugin's master and worker
        tasks the env ``torchrun`` reads (``PET_NNODES``, ``PET_NODE_RANK``,
        ``PET_NPROC_PER_NODE`` from the container's GPU limit, ``PET_MASTER_ADDR``,
        ``PET_MASTER_PORT``); entries the container has already are kept. Where
        ``volcano_version`` has Volcano's ``hcclrank`` plugin, also enables it and sets
        ``PET_NODE_RANK`` from the pod annotation it writes.
    :param shm_size: ``sizeLimit`` of a memory-backed ``emptyDir`` mounted at ``/dev/shm`` in
        those containers (unless one mounts something there already); ``None``: none.
    :param allowed_secrets: exact names of the Secrets pod templates may name (``env``
        ``secretKeyRef``, ``envFrom``, ``secret``, ``projected`` and driver volumes,
        ``imagePullSecrets``), whatever set them (template, macro, ``env``). The Secrets
        ``run_env`` reads (the run's own key) are always allowed. ``None``: no others.
    :param allowed_schedulers: the ``schedulerName`` values the job and its pod templates may
        have; by default only ``volcano`` (another scheduler ignores the gang and the queue's
        quota). ``None``: any.
    :param allowed_queues: exact names; the final ``spec.queue`` (``default`` when unset, as
        Volcano fills it) must be one of them. ``None``: any.
    :param allowed_priority_classes: exact names; every ``priorityClassName`` (the job's and
        the pod templates') must be one of them. ``None``: any.
    :param max_total_gpus: the most GPUs (``<vendor>/gpu`` limits, over every pod of every
        task) the job may ask for in all, e.g. a cap on what a Trigger form can ask;
        ``None``: no cap.
    :param volcano_version: the Volcano release the job is for (``v1.14.1``, ``1.13``; the
        oldest is ``v1.7.0``, the first with the ``pytorch`` plugin): the renderer adds only
        plugins it has, and a template naming one it lacks is an error at
        ``spec.plugins.<name>``, as its admission webhook would refuse the job.
    :param checkpoint_volume: the name of a PersistentVolumeClaim for the trainer's
        checkpoints (docs/trainer.md, "Checkpoints"): every task's pod template gets a volume
        of it, mounted at ``/checkpoints`` in the main container, which gets
        ``AVW_CHECKPOINT_DIR=/checkpoints/<the run_id macro>`` (one directory per run) and
        ``AVW_RESUME_FROM=latest`` (unless it sets ``AVW_RESUME_FROM`` itself). ``None``: none.
    :param checkpoint_artifact: True to keep the checkpoints in the run's W&B artifact,
        ``checkpoint-<the run_id macro>`` (``AVW_CHECKPOINT_ARTIFACT``), for a cluster without
        a shared volume; without ``checkpoint_volume`` the ``/checkpoints`` volume is then each
        pod's own ``emptyDir``. Needs an online W&B run.
    :param checkpoint_grace: seconds a deleted pod has to save a checkpoint before it is
        killed: ``terminationGracePeriodSeconds`` of every pod template. ``None``: the
        template's (the kubelet's default is 30).

    :returns: the Volcano Job as a new plain dict (JSON types only).
    :raises TemplateError: with the JSON path of every offending field.
    """
    from_env = macros_from_env_names(macros_from_env)
    shaping = Shaping.checked(
        gang=gang,
        add_master_policy=add_master_policy,
        max_replicas=max_replicas,
        torchrun_env=torchrun_env,
        shm_size=shm_size,
        volcano_version=volcano_version,
    )
    checkpoints = Checkpoints.checked(
        volume=checkpoint_volume,
        grace=checkpoint_grace,
        artifact=checkpoint_artifact,
        run_id=macros.get("run_id") if isinstance(macros, Mapping) else None,
    )
    placement = Placement(name, namespace, queue, template_namespace_allowed)
    task_overrides = overrides.TaskOverrides(
        replicas=replicas,
        image=image,
        env=env,
        resources=resources,
        command=command,
        args=args,
        service_account=service_account,
        labels=labels,
        annotations=annotations,
        pod_labels=pod_labels,
        pod_annotations=pod_annotations,
    )
    policy = Policy.from_arguments(
        pod_security=pod_security,
        allowed_images=allowed_images,
        allowed_namespaces=allowed_namespaces,
        service_account=service_account,
        allowed_service_accounts=allowed_service_accounts,
        allowed_secrets=allowed_secrets,
        provider_secrets=_run_env_secrets(run_env),
        allowed_schedulers=allowed_schedulers,
        allowed_queues=allowed_queues,
        allowed_priority_classes=allowed_priority_classes,
        max_total_gpus=max_total_gpus,
    )
    variables = _Variables(template_variables, template_variable_schemas, run_config)
    return _render(
        template,
        macros,
        from_env,
        placement,
        task_overrides,
        run_env,
        shaping,
        policy,
        checkpoints,
        variables,
    )


class _Variables(NamedTuple):
    """What W&B Launch hands a run: its template variables and its run config."""

    values: Mapping[str, Any] | None
    schemas: Sequence[Mapping[str, Any] | str] | None
    run_config: Mapping[str, Any] | None


def _render(
    template: TemplateSource,
    macros: Mapping[str, Any],
    from_env: tuple[str, ...],
    placement: Placement,
    task_overrides: overrides.TaskOverrides,
    run_env: RunEnv | None,
    shaping: Shaping,
    policy: Policy,
    checkpoints: Checkpoints,
    variables: _Variables,
) -> dict[str, Any]:
    """The stages, in order (the module's docstring), with every argument already checked."""
    loaded, filled = render_variables(_load(template), variables.values, variables.schemas)
    job, wide_ints = substitute(loaded, macros, from_env)
    tasks = check_shape(job)
    normalize(job, tasks)
    replicas_before = gang_sizes.replica_counts(tasks)
    namespace_source = placement.apply(job, policy.namespaces)
    guardrails = Guardrails(job, filled)
    task_overrides.apply(job, tasks, shaping.max_replicas, lambda name: guardrails.judge(job, name))
    guardrails.check()
    if run_env is not None:
        _apply_run_env(job, tasks, run_env)
    apply_run_config(tasks, variables.run_config)
    checkpoints.apply(tasks)
    shaping.apply(job, tasks, replicas_before)
    validate(job, tasks, shaping.max_replicas, wide_ints, shaping.target)
    problems = policy.problems(job, tasks, namespace_source)
    if problems:
        raise errors_at(
            problems,
            f"the rendered Volcano Job breaks the security policy ({len(problems)} problem(s))",
        )
    return job
