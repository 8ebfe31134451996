"""Identity, deployments, intents and the adoption fence (pure)."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.job.ownership import (
    DEPLOYMENT_LABEL,
    INTENT_LABEL,
    REPORTED_ANNOTATION,
    TRY_NUMBER_ANNOTATION,
    TaskInstanceIdentity,
    is_reported,
    may_delete,
    next_intent,
    owner_try,
)
from airflow_volcano_wandb.wandb.wandb_run import deterministic_run_id

TI = ("dag", "train", "scheduled__2026-11-30T00:00:00+00:00")


def job(uid="u", **annotations):
    return {"metadata": {"name": "j", "uid": uid, "annotations": annotations}}


def test_a_deployment_changes_the_identity_and_the_run_id_but_unset_keeps_the_old_ones():
    plain = TaskInstanceIdentity(*TI)
    prod, staging = (TaskInstanceIdentity(*TI, deployment=d) for d in ("prod", "staging"))
    assert len({plain.digest, prod.digest, staging.digest}) == 3
    assert plain.key == "dag/train/scheduled__2026-11-30T00:00:00+00:00/-1"
    assert DEPLOYMENT_LABEL not in plain.labels() and prod.labels()[DEPLOYMENT_LABEL] == "prod"
    assert not prod.owns({"metadata": {"labels": staging.labels()}})
    runs = {deterministic_run_id(*TI, deployment=d) for d in ("", "prod", "staging")}
    assert len(runs) == 3 and deterministic_run_id(*TI) in runs


def test_each_fresh_submission_gets_its_own_run_id():
    first, second = (deterministic_run_id(*TI, intent=n) for n in (1, 2))
    assert first == deterministic_run_id(*TI) and first != second


def test_reported_and_owner_try_are_read_from_annotations():
    assert not is_reported(job()) and is_reported(job(**{REPORTED_ANNOTATION: "2"}))
    assert owner_try(job(**{TRY_NUMBER_ANNOTATION: "3"})) == 3
    assert owner_try(job()) is None


@pytest.mark.parametrize(
    ("current", "uid", "try_number", "allowed"),
    [
        (None, "u", 1, False),
        (job(uid="other", **{TRY_NUMBER_ANNOTATION: "1"}), "u", 1, False),
        (job(**{TRY_NUMBER_ANNOTATION: "1"}), "u", 1, True),
        (job(**{TRY_NUMBER_ANNOTATION: "2"}), "u", 1, False),  # a newer try adopted it
        (job(**{TRY_NUMBER_ANNOTATION: "2"}), "u", None, True),  # no fence asked for
        (job(), "u", 1, True),  # submitted by an older version: no owner recorded
    ],
)
def test_a_late_kill_deletes_only_what_no_newer_try_adopted(current, uid, try_number, allowed):
    assert may_delete(current, uid, try_number) is allowed


def test_a_fresh_submission_never_takes_the_intent_of_a_reported_job():
    def past(intent: int, reported: bool = True) -> dict:
        annotations = {REPORTED_ANNOTATION: "1"} if reported else {}
        return {"metadata": {"labels": {INTENT_LABEL: str(intent)}, "annotations": annotations}}

    assert next_intent([], 3) == 3
    assert next_intent([past(1)], 2) == 2  # an ordinary clear: the new try's own number
    assert next_intent([past(1), past(2)], 1) == 3  # `airflow tasks test`, a DB reset
    assert next_intent([past(1, reported=False)], 1) == 1  # unreported: reattached, not new


def test_selector_matching_for_the_watch_of_managed_jobs():
    from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR, selector_matches

    managed = {"metadata": {"labels": TaskInstanceIdentity(*TI).labels()}}
    foreign = {"metadata": {"labels": {"app": "x"}}}
    assert selector_matches(MANAGED_SELECTOR, managed)
    assert not selector_matches(MANAGED_SELECTOR, foreign)
    assert selector_matches(None, foreign) and selector_matches("", {"metadata": {}})


def test_only_an_earlier_tries_reported_job_of_this_very_task_instance_is_replaceable():
    from airflow_volcano_wandb.job.ownership import IDENTITY_ANNOTATION, replaceable_past

    mine = TaskInstanceIdentity(*TI)

    def reported(identity, by="1"):
        meta = {
            "name": "fixed",
            "uid": "u",
            "labels": identity.labels(),
            "annotations": {**identity.annotations(1), REPORTED_ANNOTATION: by},
        }
        return {"metadata": meta}

    assert replaceable_past(reported(mine), mine, try_number=2)
    # Not reported: the submit/reattach rule decides, never this one.
    unreported = reported(mine)
    del unreported["metadata"]["annotations"][REPORTED_ANNOTATION]
    assert not replaceable_past(unreported, mine, try_number=2)
    # Reported by this try or a later one: a metadata DB reset or a twin deployment.
    assert not replaceable_past(reported(mine, by="2"), mine, try_number=2)
    assert not replaceable_past(reported(mine, by="3"), mine, try_number=2)
    # Another task instance, another deployment of the same one.
    other = TaskInstanceIdentity("dag", "other", TI[2])
    assert not replaceable_past(reported(other), mine, try_number=2)
    prod = TaskInstanceIdentity(*TI, deployment="prod")
    assert not replaceable_past(reported(prod), mine, try_number=2)
    assert not replaceable_past(reported(mine), prod, try_number=2)
    # The hash label alone is not enough: the exact identity must be written on it too.
    forged = reported(mine)
    forged["metadata"]["annotations"][IDENTITY_ANNOTATION] = other.key
    assert not replaceable_past(forged, mine, try_number=2)


def test_every_pod_names_its_task_instance_and_try_in_label_safe_values():
    from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
    from airflow_volcano_wandb.template.naming import is_label_value

    identity = TaskInstanceIdentity("dag", "train", "manual__2026-12-03T11:34:58+00:00", 2)
    labels = identity.pod_labels(3)
    assert labels["app.kubernetes.io/managed-by"] == "airflow-volcano-wandb"
    assert labels["airflow-volcano-wandb.io/dag-id"] == "dag"
    assert labels["airflow-volcano-wandb.io/task-id"] == "train"
    assert labels["airflow-volcano-wandb.io/map-index"] == "2"
    assert labels["airflow-volcano-wandb.io/try-number"] == "3"
    assert labels["airflow-volcano-wandb.io/task-instance"] == identity.digest
    assert all(is_label_value(value) for value in labels.values())  # the run id made safe
