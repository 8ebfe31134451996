"""The submission plan (pure): one read in, the steps a try carries out.

Every action the plan can choose, from the job as one LIST (or the create's 409 and GET) shows
it, the try number, ``reattach_on_restart`` and the task state store's job.
"""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.job.ownership import (
    IDENTITY_ANNOTATION,
    INTENT_LABEL,
    REPORTED_ANNOTATION,
    TRY_NUMBER_ANNOTATION,
    TaskInstanceIdentity,
)
from airflow_volcano_wandb.job.submission_plan import Action, Try, plan, plan_taken

IDENTITY = TaskInstanceIdentity("dag", "train", "manual__1")
OTHER = TaskInstanceIdentity("dag", "train", "manual__2")


def job(
    phase: str = "Running",
    *,
    name: str = "j",
    uid: str = "u",
    owner: int | None = 1,
    intent: int = 1,
    reported: int | None = None,
    deleting: bool = False,
    identity: TaskInstanceIdentity = IDENTITY,
) -> dict:
    annotations = {IDENTITY_ANNOTATION: identity.key}
    if owner is not None:
        annotations[TRY_NUMBER_ANNOTATION] = str(owner)
    if reported is not None:
        annotations[REPORTED_ANNOTATION] = str(reported)
    meta = {
        "name": name,
        "namespace": "ns",
        "uid": uid,
        "resourceVersion": "7",
        "labels": identity.job_labels(intent, "run"),
        "annotations": annotations,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    return {"metadata": meta, "status": {"state": {"phase": phase}}}


def try_(number: int = 1, reattach: bool = True) -> Try:
    return Try(IDENTITY, number, reattach)


def actions(steps) -> list[Action]:
    return [step.action for step in steps]


def test_nothing_listed_creates_for_the_try_number():
    decided = plan([], try_(3))
    assert decided.intent == 3
    assert actions(decided.steps) == [Action.CREATE]


@pytest.mark.parametrize(
    ("phase", "deleting", "reattach", "expected"),
    [
        ("Running", False, True, [Action.REUSE]),
        ("Pending", False, True, [Action.REUSE]),
        ("Completed", False, False, [Action.REUSE]),  # its success counts, reattach or not
        ("Running", False, False, [Action.DELETE, Action.CREATE]),
        ("Failed", False, True, [Action.DELETE, Action.CREATE]),
        ("Aborted", False, True, [Action.DELETE, Action.CREATE]),
        ("Terminated", False, True, [Action.DELETE, Action.CREATE]),
        ("Running", True, True, [Action.WAIT_GONE, Action.CREATE]),
        ("Completed", True, True, [Action.WAIT_GONE, Action.CREATE]),
    ],
)
def test_one_unreported_job_of_this_try(phase, deleting, reattach, expected):
    listed = [job(phase, deleting=deleting)]
    steps = plan(listed, try_(1, reattach)).steps
    assert actions(steps) == expected
    if expected[0] is not Action.REUSE:
        assert steps[0].job is listed[0] and steps[-1].job is None


def test_a_live_job_of_an_earlier_try_is_adopted_by_this_one():
    earlier = job(owner=1)
    (step,) = plan([earlier], try_(2)).steps
    assert step.action is Action.ADOPT and step.job is earlier
    assert step.annotations == {TRY_NUMBER_ANNOTATION: "2"}
    assert actions(step.if_gone) == [Action.CREATE]  # gone before the patch: submit afresh
    assert "Reattaching to running Volcano job %s/%s (%s)" in [line.message for line in step.lines]


def test_a_job_of_an_older_version_without_an_owner_try_is_adopted():
    assert actions(plan([job(owner=None)], try_(1)).steps) == [Action.ADOPT]


def test_a_completed_job_is_reused_without_a_reattach_line():
    (step,) = plan([job("Completed")], try_(1)).steps
    assert step.action is Action.REUSE and step.lines == ()


@pytest.mark.parametrize("phase", ["Completed", "Failed", "Running"])
def test_a_reported_job_is_a_past_result_left_alone_whatever_its_phase(phase):
    decided = plan([job(phase, reported=1, intent=1)], try_(2))
    assert actions(decided.steps) == [Action.CREATE]
    assert decided.intent == 2


def test_a_try_under_a_reported_intent_takes_the_next_free_one():
    listed = [job("Completed", uid="a", intent=1, reported=1), job(uid="b", intent=2, reported=2)]
    assert plan(listed, try_(1)).intent == 3


def test_earlier_jobs_are_cleared_in_list_order_up_to_the_first_reusable_one():
    failed, dying, live, after = (
        job("Failed", name="a", uid="a"),
        job(name="b", uid="b", deleting=True),
        job(name="c", uid="c", owner=1),
        job("Failed", name="d", uid="d"),
    )
    steps = plan([failed, dying, live, after], try_(2)).steps
    assert actions(steps) == [Action.DELETE, Action.WAIT_GONE, Action.ADOPT]
    assert [step.job for step in steps] == [failed, dying, live]
    # Should the adopted job vanish first, the jobs after it decide, as the list went on.
    assert actions(steps[-1].if_gone) == [Action.DELETE, Action.CREATE]
    assert steps[-1].if_gone[0].job is after


def test_the_remembered_job_goes_first_when_it_may_be_reused():
    failed, remembered = job("Failed", name="a", uid="a"), job(name="b", uid="b", owner=2)
    (step,) = plan([failed, remembered], try_(2), remembered).steps
    assert step.action is Action.REUSE and step.job is remembered
    assert step.lines[0].message == "The task state store names job %s/%s (uid %s)"
    assert step.lines[0].args == ("ns", "b", "b")


def test_the_remembered_job_adopted_falls_back_to_the_rest_of_the_list_when_gone():
    failed, remembered = job("Failed", name="a", uid="a"), job(name="b", uid="b", owner=1)
    (step,) = plan([failed, remembered], try_(2), remembered).steps
    assert step.action is Action.ADOPT
    assert actions(step.if_gone) == [Action.DELETE, Action.CREATE]
    assert step.if_gone[0].job is failed  # the remembered job is not planned on twice


def test_a_remembered_job_that_may_not_be_reused_is_left_to_the_label_search():
    remembered = job("Failed", uid="r")
    steps = plan([remembered], try_(2), remembered).steps
    assert actions(steps) == [Action.DELETE, Action.CREATE]
    reported = job("Completed", uid="r", reported=1)
    assert actions(plan([reported], try_(2), reported).steps) == [Action.CREATE]


def test_the_plan_says_why_it_deletes_or_waits():
    (delete, _) = plan([job("Failed")], try_(2)).steps
    assert delete.lines[0].args == ("ns", "j", "Failed")
    assert "Deleting this task instance's earlier job" in delete.lines[0].message
    (wait, _) = plan([job(deleting=True)], try_(2)).steps
    assert "is being deleted" in wait.lines[0].message


def test_a_name_taken_by_nobody_any_more_is_created_again():
    assert actions(plan_taken(None, try_(1))) == [Action.CREATE]


def test_a_name_taken_by_another_task_instance_is_refused():
    (step,) = plan_taken(job(identity=OTHER), try_(1))
    assert step.action is Action.REFUSE
    assert "ns/j already exists and belongs to dag/train/manual__2/-1" in step.reason


def test_a_name_taken_by_an_earlier_try_s_reported_job_is_replaced():
    past = job("Completed", reported=1)
    steps = plan_taken(past, try_(2))
    assert actions(steps) == [Action.REPLACE, Action.CREATE]
    assert steps[0].job is past
    assert steps[0].lines[0].args == ("ns", "j", 1)


@pytest.mark.parametrize("reported_by", [2, 3])
def test_a_reported_job_of_this_try_or_a_later_one_is_refused_not_replaced(reported_by):
    (step,) = plan_taken(job("Completed", reported=reported_by), try_(2))
    assert step.action is Action.REFUSE
    assert f"try {reported_by} already reported" in step.reason


def test_a_reported_job_of_another_deployment_with_the_same_labels_is_refused():
    other_key = job("Completed", reported=1)
    other_key["metadata"]["annotations"][IDENTITY_ANNOTATION] = "prod:" + IDENTITY.key
    (step,) = plan_taken(other_key, try_(2))
    assert step.action is Action.REFUSE


def test_a_name_taken_by_this_task_instance_s_unreported_job_follows_the_list_rule():
    assert actions(plan_taken(job(owner=1), try_(1))) == [Action.REUSE]
    assert actions(plan_taken(job(owner=1), try_(2))) == [Action.ADOPT]
    assert actions(plan_taken(job("Failed"), try_(2))) == [Action.DELETE, Action.CREATE]


def test_the_intent_label_of_a_reported_job_is_what_the_next_intent_skips():
    reported = job("Completed", reported=1, intent=4)
    assert reported["metadata"]["labels"][INTENT_LABEL] == "4"
    assert plan([reported], try_(4)).intent == 5
