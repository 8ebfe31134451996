"""One decision per fresh read before a delete: whose the job is, whether a kill may stop it."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.job import deletion
from airflow_volcano_wandb.job.deletion import Deletion
from airflow_volcano_wandb.job.ownership import TRY_NUMBER_ANNOTATION
from test_support.scripted_hook import ScriptedVolcanoHook


def _job(phase: str = "Running", uid: str = "u", owner: int | None = 1) -> dict:
    annotations = {TRY_NUMBER_ANNOTATION: str(owner)} if owner is not None else {}
    job = {
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": "7",
            "annotations": annotations,
        }
    }
    if phase:
        job["status"] = {"state": {"phase": phase}}
    return job


@pytest.mark.parametrize(
    ("phase", "deletes"),
    [
        ("", True),
        ("Pending", True),
        ("Running", True),
        ("Restarting", True),
        ("Completing", True),
        ("Completed", False),
        ("Failed", False),
        ("Aborted", False),
        ("Terminated", False),
    ],
)
def test_a_kill_deletes_only_a_job_that_has_not_ended(phase, deletes):
    """A stale trigger's on_kill may run after its job ended and its task resumed (a second
    triggerer took the wait over): that is not a kill of running training."""
    step = deletion.decide(_job(phase), "u", 1, kill=True)
    assert step is (Deletion.DELETE if deletes else Deletion.ENDED)


def test_the_end_of_a_wait_deletes_an_ended_job_too():
    """``on_finish_action="delete"`` removes a failed job: only a kill spares ended ones."""
    assert deletion.decide(_job("Failed"), "u", 1, kill=False) is Deletion.DELETE


@pytest.mark.parametrize(
    ("job", "uid", "try_number", "step"),
    [
        (None, "u", 1, Deletion.GONE),
        (_job(uid="other"), "u", 1, Deletion.GONE),  # a new submission under the name
        (_job(owner=2), "u", 1, Deletion.NEWER_TRY),
        (_job(owner=2), "u", None, Deletion.DELETE),  # the sensor names no try
        (_job(owner=None), "u", 1, Deletion.DELETE),
        (_job(owner=1), "u", 1, Deletion.DELETE),
    ],
)
def test_only_this_submission_and_no_newer_try_s(job, uid, try_number, step):
    assert deletion.decide(job, uid, try_number, kill=False) is step


def test_a_delete_carries_the_read_uid_and_version_and_reads_again_after_a_conflict():
    hook = ScriptedVolcanoHook([_job(), _job()], conflicts=1)
    deletion.delete_if_owned(hook, {"name": "j", "namespace": "ns", "uid": "u"}, 1)
    assert hook.deletes == [("j", "ns", "u", "7"), ("j", "ns", "u", "7")]


def test_a_job_a_newer_try_adopted_between_reads_is_left():
    hook = ScriptedVolcanoHook([_job(), _job(owner=2)], conflicts=1)
    deletion.delete_if_owned(hook, {"name": "j", "namespace": "ns", "uid": "u"}, 1)
    assert len(hook.deletes) == 1  # the first delete lost; the second read says "newer try"


def test_a_failing_read_is_logged_not_raised(caplog):
    broken = ScriptedVolcanoHook([RuntimeError("apiserver down")])
    deletion.delete_if_owned(broken, {"name": "j", "namespace": "ns", "uid": "u"}, 1)
    assert "Could not delete Volcano job ns/j" in caplog.text
