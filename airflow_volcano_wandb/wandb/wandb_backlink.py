"""The link from a W&B run back to the Airflow task that ran it, written by the provider.

When the task ends, the provider writes through the W&B public API: the run's config gets an
``airflow`` entry (task URL, DAG, run, task and try ids, the outcome, a resume's facts), its
tags ``airflow`` and ``airflow-<outcome>``, and its notes a line with the task URL (and
``Resumed from step N (checkpoint PATH)`` after a resume). Pure, except :func:`link_back`,
which never lets a failure reach the task: the link is a courtesy, the outcome is the job's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_volcano_wandb.wandb.wandb_run import AirflowRunContext

CONFIG_KEY = "airflow"
TAG = "airflow"
OUTCOME_TAG_PREFIX = "airflow-"
NOTES_MARKER = "Airflow task:"
#: The facts of a resume written into the ``airflow`` config entry (as the operator's XComs
#: name them): the intent whose run the try continued, the step and the checkpoint its trainer
#: continued from, and the GPU-seconds that saved.
RESUME_KEYS = (
    "resumed_from_intent",
    "resumed_from_step",
    "resumed_from_checkpoint",
    "resume_saved_gpu_seconds",
)


@dataclass(frozen=True)
class RunFields:
    """The editable fields of a W&B run the link touches: its config (plain values, as
    ``wandb.Api().run(...).config``), tags and notes (its description in the UI)."""

    config: Mapping[str, Any] = field(default_factory=dict)
    tags: Sequence[str] = ()
    notes: str | None = None


def airflow_record(ctx: AirflowRunContext, outcome: str) -> dict[str, Any]:
    """The ``airflow`` config entry: where the run came from and how the task ended.

    The keys are those the trainer writes from the env (``wandb_run.airflow_config_from_env``),
    plus ``outcome``, so both writers agree on one entry.

    :param outcome: the Airflow outcome, e.g. ``success``, ``failed``, ``pending_timeout``.
    """
    return {
        "task_url": ctx.task_url,
        "dag_id": ctx.dag_id,
        "run_id": ctx.dag_run_id,
        "task_id": ctx.task_id,
        "map_index": ctx.map_index,
        "try_number": ctx.try_number,
        "logical_date": ctx.logical_date,
        "outcome": outcome,
    }


def resumed_note(resumed: Mapping[str, Any]) -> str | None:
    """The notes line of a resumed try: the step and checkpoint its trainer continued from
    and the GPU-seconds that saved; None when the trainer did not say its step."""
    step, checkpoint = resumed.get("resumed_from_step"), resumed.get("resumed_from_checkpoint")
    if step is None:
        return None
    line = f"Resumed from step {step}" + (f" (checkpoint {checkpoint})" if checkpoint else "")
    saved = resumed.get("resume_saved_gpu_seconds")
    return line if saved is None else f"{line}: {saved:g} GPU-seconds saved"


def with_backlink(
    fields: RunFields,
    ctx: AirflowRunContext,
    outcome: str,
    resumed: Mapping[str, Any] | None = None,
) -> RunFields:
    """The run's fields with the Airflow link written in, everything else kept.

    Written again by a later try, it replaces what the earlier one wrote: one ``airflow``
    config entry, one outcome tag, one notes line (each resume keeps its own line: a run
    resumed twice says both).

    :param fields: the run's fields as read from W&B.
    :param resumed: for a try that resumed an interrupted try's run, the facts of
        :data:`RESUME_KEYS` it knows (the others absent or None).
    """
    written = fields.config.get(CONFIG_KEY)
    kept = dict(written) if isinstance(written, Mapping) else {}
    said = {k: v for k, v in (resumed or {}).items() if k in RESUME_KEYS and v is not None}
    config = {**fields.config, CONFIG_KEY: {**kept, **airflow_record(ctx, outcome), **said}}
    tags = [t for t in fields.tags if not t.startswith(OUTCOME_TAG_PREFIX)]
    for tag in (TAG, f"{OUTCOME_TAG_PREFIX}{outcome}"[:64]):  # W&B's tag limit: 64 characters
        if tag not in tags:
            tags.append(tag)
    line = f"{NOTES_MARKER} {ctx.task_url or ctx.dag_id + '/' + ctx.task_id} "
    line += f"(DAG run {ctx.dag_run_id}, try {ctx.try_number}: {outcome})"
    lines = [old for old in (fields.notes or "").splitlines() if not old.startswith(NOTES_MARKER)]
    note = resumed_note(said)
    lines += [note] if note is not None and note not in lines else []
    notes = "\n".join([*[k for k in lines if k.strip()], line])
    return RunFields(config=config, tags=tags, notes=notes)


class RunEditor(Protocol):
    """What :func:`link_back` needs of the W&B hook."""

    def edit_run(
        self,
        run_id: str,
        *,
        entity: str | None,
        project: str | None,
        edit: Callable[[RunFields], RunFields],
    ) -> None: ...


def link_back(
    hook: RunEditor,
    ctx: AirflowRunContext,
    outcome: str,
    *,
    run_id: str,
    entity: str | None,
    project: str | None,
    mode: str | None,
    has_key: bool,
    log: logging.Logger | Any,
    resumed: Mapping[str, Any] | None = None,
) -> bool:
    """Write the Airflow link (:func:`with_backlink`) into the W&B run through ``hook``
    (``WandbHook``); best-effort, one line in the task's ``log`` whatever happens.

    :param entity: the run's entity (``None``: the connection's, then the key's user).
    :param mode: the run's ``wandb_mode``; ``offline`` and ``disabled`` runs are not on a server.
    :param has_key: whether the connection has an API key (without one nothing can be written).
    :return: whether the link was written.
    """
    if mode in ("offline", "disabled") or not has_key:
        why = f"W&B mode is {mode}" if mode in ("offline", "disabled") else "no W&B API key"
        log.info(
            "%s: the Airflow task is not linked from the W&B run %s (the trainer still gets "
            "AVW_AIRFLOW_TASK_URL)",
            why,
            run_id,
        )
        return False
    try:
        hook.edit_run(
            run_id,
            entity=entity,
            project=project,
            edit=lambda fields: with_backlink(fields, ctx, outcome, resumed),
        )
    except Exception as exc:  # the link must never change the task's outcome
        log.warning(
            "Could not write the Airflow link into W&B run %s (%s: %s)",
            run_id,
            type(exc).__name__,
            exc,
        )
        return False
    log.info("W&B run %s now links to this task (outcome %s)", run_id, outcome)
    return True
