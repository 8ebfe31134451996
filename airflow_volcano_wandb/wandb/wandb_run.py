"""The W&B side of a Volcano training job, as pure data and pure functions (no Airflow, no
``wandb``, no HTTP): the run identity, built before the operator talks to any server.

The SDK's rules for names (run id characters, tag length, project characters) are checked
here, at DAG-run time: a bad value would otherwise surface only inside the training pods.
``docs/wandb.md`` is the user-facing description.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from airflow_volcano_wandb.wandb.wandb_urls import check_base_url, run_url

RankMode = Literal["master", "shared"]
WandbMode = Literal["online", "offline", "disabled"]
RANK_MODES: tuple[str, ...] = ("master", "shared")
WANDB_MODES: tuple[str, ...] = ("online", "offline", "disabled")

#: The SDK's other spellings of the same modes, as ``WANDB_MODE`` may carry them.
_MODE_ALIASES = {"dryrun": "offline", "run": "online"}


def effective_mode(mode: str | None, environ: Mapping[str, str]) -> str | None:
    """The run's W&B mode: ``wandb_mode`` when the DAG gives one, else the Airflow process's
    ``WANDB_MODE`` (the SDK's own variable, so it means to the provider what it means to the
    SDK), else ``None`` (the SDK's default, online).

    One meaning of offline everywhere: an Airflow whose environment says
    ``WANDB_MODE=offline`` runs its pods offline (they get ``WANDB_MODE=offline``), needs no
    API key, and never writes back to W&B (summary, link back, lineage, resume check), as
    ``wandb_mode="offline"`` does; ``doctor`` judges the W&B connection by the same rule.

    :param mode: the operator's ``wandb_mode``; a Jinja template is returned as given.
    :param environ: the Airflow process's environment (``os.environ``).
    :raises ValueError: when ``WANDB_MODE`` is set to something the SDK does not know.
    """
    if mode is not None:
        return mode
    value = (environ.get("WANDB_MODE") or "").strip().lower()
    if not value:
        return None
    value = _MODE_ALIASES.get(value, value)
    if value not in WANDB_MODES:
        raise ValueError(
            f"WANDB_MODE={environ['WANDB_MODE']!r} in the Airflow environment is not a W&B mode "
            f"({', '.join(WANDB_MODES)})"
        )
    return value


_BASE36 = string.digits + string.ascii_lowercase
_RUN_ID_LENGTH = 16
# Characters the wandb SDK rejects in a run id (wandb_settings.validate_run_id).
_RUN_ID_RESERVED = set(":;,#?/'")
# Characters the wandb SDK rejects in a project name (wandb_settings.validate_project).
_PROJECT_RESERVED = set("/\\#?%:")
_MAX_TAG_LENGTH = 64
_MAX_PROJECT_LENGTH = 128


def deterministic_run_id(
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int = -1,
    *,
    deployment: str = "",
    intent: int = 1,
) -> str:
    """Return the W&B run id for one submission (intent) of one Airflow task instance.

    A try that reattaches to its task instance's unreported job keeps that job's run, so a
    crashed worker's retry resumes it (``WANDB_RESUME=allow``). A try that submits afresh (the
    earlier job's outcome was reported, e.g. a cleared task) is a new intent, numbered by the
    try that submits it, and gets a run of its own. The id is 16 lowercase base36 characters:
    valid for W&B, for Kubernetes names and labels, and about 82 bits of sha256.

    :param run_id: The Airflow DAG run id (not a W&B id).
    :param map_index: The map index of a mapped task, ``-1`` for an unmapped one.
    :param deployment: The Airflow deployment (``[volcano_wandb] deployment``), so that two
        deployments with the same DAG and run ids never share a run.
    :param intent: The try number that submits the job; the first try keeps the id of
        earlier versions.
    """
    # NUL separators: ids cannot contain NUL, so ("a.b", "c") and ("a", "b.c") stay distinct.
    parts = ["avw-run-id-v1", dag_id, task_id, run_id, str(int(map_index))]
    if deployment or intent != 1:
        parts += [deployment, str(int(intent))]
    material = "\0".join(parts)
    number = int.from_bytes(hashlib.sha256(material.encode("utf-8")).digest(), "big")
    digits = []
    for _ in range(_RUN_ID_LENGTH):
        number, digit = divmod(number, 36)
        digits.append(_BASE36[digit])
    return "".join(digits)


def default_run_group(dag_id: str, dag_run_id: str) -> str:
    """Return the default W&B group for a DAG run: every task of one DAG run shares it."""
    return f"{dag_id}/{dag_run_id}"


def default_run_name(dag_id: str, task_id: str, dag_run_id: str, map_index: int = -1) -> str:
    """Return the default display name of the W&B run of one task instance."""
    task = task_id if map_index < 0 else f"{task_id}[{map_index}]"
    return f"{dag_id}.{task} {dag_run_id}"


class SecretKeyRef(NamedTuple):
    """A key in a Kubernetes Secret (in the job's namespace) that holds the W&B API key."""

    name: str
    key: str

    @classmethod
    def of(cls, value: Any, what: str = "api_key_secret") -> SecretKeyRef:
        """``value``, a ``(secret_name, key)`` pair of non-empty strings, as a reference;
        :class:`ValueError` naming ``what`` for anything else."""
        if not (
            isinstance(value, list | tuple)
            and len(value) == 2
            and all(isinstance(part, str) and part for part in value)
        ):
            raise ValueError(f"{what} needs a Secret name and key, got {value!r}")
        return cls(*value)


@dataclass(frozen=True)
class ArtifactRef:
    """One W&B artifact version a run used or logged (lineage's inputs and outputs).

    :param qualified_name: ``<entity>/<project>/<name>:v<version>``.
    :param type: the artifact type, e.g. ``dataset`` or ``model``.
    """

    qualified_name: str
    type: str


@dataclass(frozen=True)
class AirflowRunContext:
    """The Airflow task instance a W&B run belongs to, as the trainer will see it."""

    dag_id: str
    dag_run_id: str
    task_id: str
    try_number: int
    logical_date: str | None = None
    """ISO 8601; ``None`` for DAG runs without a logical date (possible in Airflow 3)."""
    task_url: str | None = None
    """Link to the task instance in the Airflow UI."""
    map_index: int = -1


@dataclass(frozen=True)
class WandbRunSpec:
    """Everything the pods need to find, create or resume their W&B run.

    Build one with :meth:`for_task_instance` (defaults derived from the task instance) or
    directly. Validation happens at construction so a bad name fails the Airflow task before
    anything is submitted.
    """

    run_id: str
    project: str | None = None
    entity: str | None = None
    run_name: str | None = None
    group: str | None = None
    job_type: str | None = None
    tags: tuple[str, ...] = ()
    base_url: str | None = None
    """W&B API address; ``None`` means the SDK's default (W&B's multi-tenant cloud)."""
    mode: WandbMode | None = None
    """``WANDB_MODE`` for the process(es) that own the run; ``None`` leaves the SDK default."""
    rank_mode: RankMode = "master"
    api_key_secret: SecretKeyRef | None = None
    airflow: AirflowRunContext | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """Further plain env for every container (never secrets: these values are in the spec)."""
    sweep_id: str | None = None
    """A W&B sweep the run belongs to (``WANDB_SWEEP_ID``): it shows in that sweep's view."""
    resume: str = "allow"
    """``WANDB_RESUME``: ``allow`` (a restarted pod or a reattaching try continues the run, a
    first one starts it) or ``must`` (a try that resumes an interrupted run: ``job.resume``)."""

    def __post_init__(self) -> None:
        _check_run_id(self.run_id)
        if self.project is not None:
            _check_project(self.project)
        if self.entity is not None and (not self.entity or "/" in self.entity):
            raise ValueError(f"invalid W&B entity {self.entity!r}")
        # Normalise so equality and hashing do not depend on list-vs-tuple.
        object.__setattr__(self, "tags", tuple(self.tags))
        for tag in self.tags:
            _check_tag(tag)
        if self.mode is not None and self.mode not in WANDB_MODES:
            hint = " (shared mode is wandb_rank_mode='shared')" if self.mode == "shared" else ""
            raise ValueError(
                f"wandb_mode must be one of {', '.join(WANDB_MODES)} or None, "
                f"got {self.mode!r}{hint}"
            )
        if self.rank_mode not in RANK_MODES:
            raise ValueError(
                f"wandb_rank_mode must be one of {', '.join(RANK_MODES)}, got {self.rank_mode!r}"
            )
        if self.rank_mode == "shared" and self.mode == "offline":
            # Shared mode is many processes writing to one run on the server; offline runs are
            # per-process files, so N ranks would write N conflicting copies of one run id.
            raise ValueError(
                "wandb_rank_mode='shared' needs W&B online; with mode='offline' use "
                "wandb_rank_mode='master' (rank 0 writes the run, other ranks stay silent)"
            )
        if self.api_key_secret is not None:
            object.__setattr__(self, "api_key_secret", SecretKeyRef.of(self.api_key_secret))
        if self.base_url is not None:
            check_base_url(self.base_url)
        if self.sweep_id is not None:
            _check_sweep_id(self.sweep_id)
        if self.resume not in ("allow", "must"):
            raise ValueError(f"W&B resume must be 'allow' or 'must', got {self.resume!r}")
        for name, value in self.extra_env.items():
            if not isinstance(value, str):
                raise ValueError(f"extra_env[{name!r}] must be a string, got {type(value)}")
            if name == "WANDB_API_KEY":
                raise ValueError("WANDB_API_KEY must come from api_key_secret, not plain env")
        object.__setattr__(self, "extra_env", dict(self.extra_env))

    @classmethod
    def for_task_instance(
        cls,
        airflow: AirflowRunContext,
        *,
        run_id: str | None = None,
        run_name: str | None = None,
        group: str | None = None,
        job_type: str | None = None,
        tags: Iterable[str] | None = None,
        deployment: str = "",
        intent: int = 1,
        **kwargs: Any,
    ) -> WandbRunSpec:
        """Build a spec for an Airflow task instance, filling unset fields with defaults.

        ``deployment`` and ``intent`` go into the default run id (see
        :func:`deterministic_run_id`).

        Defaults: ``run_id`` from :func:`deterministic_run_id`, ``run_name`` from
        :func:`default_run_name`, ``group`` from :func:`default_run_group`, ``job_type`` =
        the task id, ``tags`` = ``("airflow", "dag:<dag_id>")`` (the dag tag is truncated to W&B's
        64 character limit). Other keyword arguments go to the constructor unchanged.
        """
        if tags is None:
            tags = ("airflow", f"dag:{airflow.dag_id}"[:_MAX_TAG_LENGTH].replace(",", "_"))
        return cls(
            run_id=run_id
            or deterministic_run_id(
                airflow.dag_id,
                airflow.task_id,
                airflow.dag_run_id,
                airflow.map_index,
                deployment=deployment,
                intent=intent,
            ),
            run_name=run_name
            or default_run_name(
                airflow.dag_id, airflow.task_id, airflow.dag_run_id, airflow.map_index
            ),
            group=group or default_run_group(airflow.dag_id, airflow.dag_run_id),
            job_type=job_type or airflow.task_id,
            tags=tuple(tags),
            airflow=airflow,
            **kwargs,
        )

    @property
    def url(self) -> str | None:
        """The run's page in the W&B UI, or ``None`` when the entity is not known yet."""
        if not self.entity or not self.project:
            return None
        return run_url(self.base_url, self.entity, self.project, self.run_id)


def _check_id(kind: str, value: str, reserved: set[str]) -> None:
    if not isinstance(value, str) or not value or value != value.strip():
        raise ValueError(f"invalid W&B {kind} {value!r}: empty or surrounded by whitespace")
    bad = sorted(set(value) & reserved)
    if bad:
        raise ValueError(f"invalid W&B {kind} {value!r}: contains {''.join(bad)!r}")


def _check_run_id(run_id: str) -> None:
    _check_id("run id", run_id, _RUN_ID_RESERVED)
    if len(run_id) > 128:
        raise ValueError(f"invalid W&B run id {run_id!r}: longer than 128 characters")


def _check_sweep_id(sweep_id: str) -> None:
    # The SDK's own rule (wandb_settings.validate_sweep_id), plus the run id's reserved
    # characters: the id is a path segment of the sweep's URL.
    _check_id("sweep id", sweep_id, _RUN_ID_RESERVED | {"%"})


def _check_project(project: str) -> None:
    bad = sorted(set(project) & _PROJECT_RESERVED)
    if not project or bad or len(project) > _MAX_PROJECT_LENGTH:
        raise ValueError(
            f"invalid W&B project {project!r}: needs 1-{_MAX_PROJECT_LENGTH} characters "
            f"without any of {''.join(sorted(_PROJECT_RESERVED))!r}"
        )


def _check_tag(tag: str) -> None:
    # Commas matter because WANDB_TAGS is split on them by the SDK.
    if not isinstance(tag, str) or not 1 <= len(tag) <= _MAX_TAG_LENGTH or "," in tag:
        raise ValueError(
            f"invalid W&B tag {tag!r}: tags need 1-{_MAX_TAG_LENGTH} characters and no comma"
        )
