"""What the operator's job is: the queue template, what fills it, and the policy it must meet.

Rendering itself is the pure ``template`` package; this part holds the options and hands
them to ``render_job`` with the run's macros and env. It declares only its own options and
the three ``render_job`` keywords it renames: every other one a DAG gives is ``render_job``'s
as it is, declared once in ``template/`` (default, doc, check and how Airflow templates it),
and held in ``keywords`` (``passed_on``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.airflow_compat import AirflowException, conf
from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.job import fit
from airflow_volcano_wandb.job.fit_check import check_fit
from airflow_volcano_wandb.job.queue_template import template_and_schemas
from airflow_volcano_wandb.job.volcano_target import configured_volcano_version
from airflow_volcano_wandb.parts.options import REQUIRED, option, passed_on, render_kwargs
from airflow_volcano_wandb.template import RunEnv, TemplateError, render_job
from airflow_volcano_wandb.template.options import options_of
from airflow_volcano_wandb.template.render import OPTIONS as RENDER_OPTIONS
from airflow_volcano_wandb.wandb import wandb_run
from airflow_volcano_wandb.wandb.wandb_env import container_env, macro_values
from airflow_volcano_wandb.wandb.wandb_queue_ref import is_queue_ref

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

DEFAULT_FINISHED_JOB_TTL = 7 * 24 * 3600
#: ``render_job``'s keywords the operator fills itself (from the task instance, its W&B run
#: and its connection's ``namespace``) or does not offer; it renames three (``render=``).
FILLED = frozenset(
    {
        "image",
        "labels",
        "annotations",
        "pod_labels",
        "namespace",
        "template_namespace_allowed",
        "run_env",
        "torchrun_env",
    }
)


def _image(value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"image_uri must be an image reference or None, not {value!r}")


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
        None, "the training image, the ``${image_uri}`` macro.", templated=True, check=_image
    )
    macros: Mapping[str, Any] | None = option(
        None,
        "further ``${name}`` values, or overrides of the built-ins.",
        typed=True,
        renderer="json",
    )
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
    container_resources: Mapping[str, Any] | None = option(
        None,
        """container resources per task name, e.g.
        ``{"worker": {"limits": {"nvidia.com/gpu": 8}}}`` (``resources`` is taken by
        Airflow).""",
        typed=True,
        render="resources",
    )
    finished_job_ttl: int | None = option(
        DEFAULT_FINISHED_JOB_TTL,
        """seconds a finished job may stay before Volcano deletes it
        (``spec.ttlSecondsAfterFinished``, unless the template sets one); default 7 days, so
        kept jobs and their Secrets do not pile up. ``None``: no limit.""",
    )
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
    #: Every other ``render_job`` keyword a DAG gives the operator, as ``render_job`` takes
    #: it: declared once, in ``template/``.
    keywords: Mapping[str, Any] = passed_on(o for o in RENDER_OPTIONS if o.name not in FILLED)
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
        given = render_kwargs(self)
        if given["checkpoint_artifact"] and spec.mode in ("offline", "disabled"):
            raise AirflowException(
                f"checkpoint_artifact needs an online W&B run to keep the checkpoints in, but "
                f"wandb_mode is {spec.mode!r}. Nothing was submitted."
            )
        try:
            template, schemas = template_and_schemas(
                self.template, given["template_variable_schemas"], wandb_hook
            )
            body = render_job(
                template,
                macros=macros,
                **{
                    **given,
                    **({"name": name} if name else {}),
                    "template_variable_schemas": schemas,
                    "macros_from_env": configured_macros_from_env(given["macros_from_env"]),
                    "volcano_version": given["volcano_version"] or configured_volcano_version(),
                },
                labels=labels,
                annotations=annotations,
                pod_labels=pod_labels,
                namespace=namespace,
                template_namespace_allowed=not from_queue,
                run_env=RunEnv(
                    master=container_env(spec, is_master_task=True),
                    others=container_env(spec, is_master_task=False),
                ),
            )
        except (TemplateError, ValueError) as exc:
            raise AirflowException(
                f"Template error, nothing was submitted: {_as_named(exc)}"
            ) from exc
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


def _as_named(error: Exception) -> str:
    """The error's text, a keyword the operator renames (``queue``) called by the name the DAG
    gave it (``volcano_queue``)."""
    text = str(error)
    for o in options_of(JobRequest):
        if o.render and o.render != o.name and re.match(rf"{o.render}[:.\[]", text):
            return o.name + text[len(o.render) :]
    return text


def configured_macros_from_env(given: Sequence[str] | None) -> Sequence[str] | None:
    """``given``, else ``[volcano_wandb] macros_from_env`` (comma-separated names)."""
    if given is not None:
        return given
    configured = conf.get("volcano_wandb", "macros_from_env", fallback="") or ""
    return [name.strip() for name in configured.split(",") if name.strip()]
