"""Render a W&B Launch queue template into the Volcano Job one run submits.

Pure: no Airflow, no HTTP, no Kubernetes client. :func:`render_job` is the whole API; its
stages (``_render``) live beside it, one concept per module, in this order: ``load``;
``template_variables`` (W&B Launch's ``{{name}}``, checked against the queue's schemas);
``macros`` (``${name}``, structurally); ``normalize``; ``overrides``, each held to the schema
of a variable that fills what it changes by ``guardrails``; ``run_config``; ``checkpoints``;
``gang``; ``volcano`` (the ``pytorch`` plugin's master policy); ``naming``; ``torchrun`` (after
naming: the master's address uses the job name); ``validate``; ``policy`` (``pod_security``,
``allow_lists``, ``secret_refs``), every problem reported with its JSON path. The rendered job
is shown to people as :func:`job_as_yaml`. See ``docs/templates.md`` for the rules.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar, Union

import yaml

from airflow_volcano_wandb.template import gang as gang_sizes
from airflow_volcano_wandb.template import overrides, secret_refs, volcano
from airflow_volcano_wandb.template.checkpoints import Checkpoints
from airflow_volcano_wandb.template.errors import error_at, errors_at
from airflow_volcano_wandb.template.guardrails import Guardrails
from airflow_volcano_wandb.template.load import load_template as _load
from airflow_volcano_wandb.template.macros import macros_from_env_names, substitute
from airflow_volcano_wandb.template.normalize import normalize
from airflow_volcano_wandb.template.options import (
    keep_checked,
    option,
    options_of,
    param_docs,
    signature,
)
from airflow_volcano_wandb.template.overrides import TaskOverrides
from airflow_volcano_wandb.template.placement import Placement
from airflow_volcano_wandb.template.policy import Policy
from airflow_volcano_wandb.template.run_config import apply_run_config
from airflow_volcano_wandb.template.shaping import Shaping
from airflow_volcano_wandb.template.structure import check_shape
from airflow_volcano_wandb.template.template_variables import render_variables
from airflow_volcano_wandb.template.validate import validate
from airflow_volcano_wandb.template.values import copy_json, type_name

Part = TypeVar("Part")

#: What a template may be given as (see :func:`render_job`).
TemplateSource = Union[str, bytes, "os.PathLike[str]", Mapping[str, Any]]


class RunEnv(NamedTuple):
    """Env the provider owns (the W&B run's identity): applied after ``env``, so it wins.

    The master task (see :func:`master_task_name`) gets ``master``; every other task
    ``others``. Each is ``{name: value}`` or a list of ``{"name", "value"|"valueFrom"}``.
    """

    master: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    others: Mapping[str, Any] | Sequence[Mapping[str, Any]]


def _run_env(value: Any) -> RunEnv | None:
    if value is not None and not isinstance(value, RunEnv):
        raise error_at(("run_env",), f"must be a RunEnv(master=, others=), not {type_name(value)}")
    return value


def load_template(template: TemplateSource) -> dict[str, Any]:
    """Load a template without rendering it: a fresh copy of the Volcano Job, macros intact.

    Useful to show a template or read its task names before a run has values for its macros.
    """
    job: dict[str, Any] = copy_json(_load(template), (), "template")
    return job


def job_as_yaml(job: Mapping[str, Any]) -> str:
    """``job`` as one block YAML document (``---`` to ``...``), as ``dry_run()`` and the task
    log show it: the markers set it apart from log lines around it. Its head in kubectl's order
    (``apiVersion``, ``kind``, ``metadata``, ``spec``), so a view that shows only the start
    (Airflow truncates a rendered field) shows what the job is; the rest in the job's order.
    The job never holds the W&B API key (only a ``secretKeyRef``), so nothing is hidden."""
    head = {key: job[key] for key in ("apiVersion", "kind", "metadata", "spec") if key in job}
    return yaml.safe_dump(
        {**head, **job},
        sort_keys=False,
        default_flow_style=False,
        explicit_start=True,
        explicit_end=True,
    )


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


@dataclass(frozen=True, kw_only=True)
class Variables:
    """What the run hands the template besides ``macros``: macros from the environment, W&B
    Launch's template variables and run config, and the env the provider owns."""

    macros_from_env: Sequence[str] | None = option(
        None,
        """names (not patterns) of macros filled from this process's environment, as W&B's
        agent fills any ``${NAME}`` from its own; ``macros`` wins. Any other unknown macro is an
        error that names this option; errors never show a value. The operator's ``None`` is
        ``[volcano_wandb] macros_from_env``, its worker's environment. See docs/templates.md.""",
        check=macros_from_env_names,
    )
    template_variables: Mapping[str, Any] | None = option(
        None,
        """values of the template's W&B Launch template variables, ``{{name}}``, checked
        against ``template_variable_schemas`` (type, minimum, maximum, enum) before anything
        is submitted; a variable left out takes its schema's default. See docs/templates.md.""",
        typed=True,
        renderer="json",
    )
    template_variable_schemas: Sequence[Mapping[str, Any] | str] | None = option(
        None,
        """the queue's ``[{"name", "schema"}]``, as
        ``wandb.Api().run_queue(...).template_variables`` returns them (each schema a dict or
        JSON text): no override may step over the bounds of a variable that fills what it
        changes. ``None``: the template has no variables. A ``wandb-queue://`` template's come
        from its queue and may not be given too. With schemas, Airflow's Jinja leaves the
        operator's template alone, so its ``{{name}}`` reach W&B's rules. Not templated:
        nothing a run supplies can widen them.""",
    )
    run_config: Mapping[str, Any] | None = option(
        None,
        """the W&B run's config (hyper-parameters), handed to every rank's ``wandb.config``
        through the SDK's Launch env (``WANDB_LAUNCH``, ``WANDB_CONFIG``, in slices when
        long), as a Launch agent does: a Launch job's code reads it unchanged.""",
        typed=True,
        renderer="json",
    )
    run_env: RunEnv | None = option(
        None,
        """env the provider owns, per master/other task (:class:`RunEnv`); merged last, so a
        template's or ``env``'s entry of the same name is replaced.""",
        check=_run_env,
    )

    def __post_init__(self) -> None:
        keep_checked(self)


#: The groups ``render_job``'s keywords are declared in, in the signature's order.
RENDER = (Variables, TaskOverrides, Placement, Shaping, Policy, Checkpoints)
OPTIONS = options_of(*RENDER)
_NAMES = frozenset(o.name for o in OPTIONS)


def render_job(
    template: TemplateSource, *, macros: Mapping[str, Any], **options: Any
) -> dict[str, Any]:
    """Turn a queue template and this run's values into the Volcano Job to submit.

    :param template: a ``Path`` or one-line ``str`` naming a ``.yaml``/``.yml``/``.json`` file,
        a YAML or JSON string, or a mapping (never modified); any of them may be a W&B
        queue config ``{"resource_args": {"kubernetes": <job>}}``.
    :param macros: values for ``${name}``: the built-ins (:data:`BUILTIN_MACROS`) and any others.
        A string that is exactly ``${name}`` takes the value with its type; inside a
        longer string it is formatted as text (``true``/``false``, digits, float repr).
        ``$${name}`` gives a literal ``${name}``.
    :returns: the Volcano Job as a new plain dict (JSON types only).
    :raises TemplateError: with the JSON path of every offending field.

    Every other keyword is an option declared once, on its group in :data:`RENDER`
    (``Variables``, ``overrides.TaskOverrides``, ``Placement``, ``Shaping``, ``Policy``,
    ``Checkpoints``), which checks it:

    """
    if unknown := sorted(set(options) - _NAMES):
        raise TypeError(f"render_job() got an unexpected keyword argument {unknown[0]!r}")
    variables = _built(Variables, options)
    shaping = _built(Shaping, options)
    run_id = macros.get("run_id") if isinstance(macros, Mapping) else None
    checkpoints = _built(Checkpoints, options, run_id=run_id)
    placement = _built(Placement, options)
    task_overrides = _built(TaskOverrides, options)
    policy = _built(
        Policy,
        options,
        service_account=task_overrides.service_account,
        provider_secrets=_run_env_secrets(variables.run_env),
    )
    return _render(
        template, macros, variables, placement, task_overrides, shaping, policy, checkpoints
    )


render_job.__doc__ = f"{render_job.__doc__}{param_docs(OPTIONS, indent='    ', shell=False)}\n"
render_job.__signature__ = signature(OPTIONS, of=render_job)  # type: ignore[attr-defined]


def _built(part: type[Part], options: Mapping[str, Any], **context: Any) -> Part:
    """``part`` from the keywords of ``options`` it declares, and ``context``; checked."""
    return part(
        **{o.name: options[o.name] for o in options_of(part) if o.name in options}, **context
    )


def _same_max_workers(replicas: Mapping[str, Any] | None, workers: tuple[int, int]) -> None:
    """``replicas={"worker": n}`` beside ``elastic=(min, max)`` must agree on the workers."""
    given = replicas.get("worker") if isinstance(replicas, Mapping) else None
    if given is not None and str(given) != str(workers[1]):
        raise errors_at(
            [
                (
                    ("elastic", "max_workers"),
                    f"is {workers[1]}, but replicas gives the worker "
                    f"task {given}: give the workers once, in elastic",
                )
            ],
            "elastic and replicas disagree",
        )


def _render(
    template: TemplateSource,
    macros: Mapping[str, Any],
    variables: Variables,
    placement: Placement,
    task_overrides: TaskOverrides,
    shaping: Shaping,
    policy: Policy,
    checkpoints: Checkpoints,
) -> dict[str, Any]:
    """The stages, in order (the module's docstring), with every argument already checked."""
    loaded, filled = render_variables(
        _load(template), variables.template_variables, variables.template_variable_schemas
    )
    job, wide_ints = substitute(loaded, macros, variables.macros_from_env or ())
    tasks = check_shape(job)
    normalize(job, tasks)
    replicas_before = gang_sizes.replica_counts(tasks)
    namespace_source = placement.apply(job, policy.allowed_namespaces)
    guardrails = Guardrails(job, filled)
    task_overrides.apply(job, tasks, shaping.max_replicas, lambda name: guardrails.judge(job, name))
    workers = shaping.size_elastic(job, tasks)
    if workers is not None:
        _same_max_workers(task_overrides.replicas, workers)
        guardrails.judge(job, "elastic")
    guardrails.check()
    if (run_env := variables.run_env) is not None:
        master = master_task_name(job)
        for task in tasks:
            overrides.apply_env(
                [task], run_env.master if task["name"] == master else run_env.others
            )
    apply_run_config(tasks, variables.run_config)
    checkpoints.apply(tasks)
    shaping.apply(job, tasks, replicas_before, workers)
    validate(job, tasks, shaping.max_replicas, wide_ints, shaping.target)
    problems = policy.problems(job, tasks, namespace_source)
    if problems:
        raise errors_at(
            problems,
            f"the rendered Volcano Job breaks the security policy ({len(problems)} problem(s))",
        )
    return job
