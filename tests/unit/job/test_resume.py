"""The resume decision (job/resume.py): which try's ending continues its W&B run, per cause."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb import exceptions
from airflow_volcano_wandb.exceptions import (
    ApiserverUnreachableError,
    ImagePullError,
    JobDeletedError,
    JobFailedError,
    JobPreemptedError,
    JobRefusedError,
    JobTimeoutError,
    JobUnschedulableError,
    JobWontFitError,
    OOMKilledError,
    StoppedFromWandbError,
    TrainerCrashLoopError,
    TrainerExitError,
    TrainingStalledError,
)
from airflow_volcano_wandb.job import resume
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.resume import Resumption, RunRecord, TrainerResumed
from airflow_volcano_wandb.template.naming import MAX_JOB_NAME_LENGTH
from airflow_volcano_wandb.wait import failure_exception
from airflow_volcano_wandb.wait.diagnostics import Classification
from airflow_volcano_wandb.wait.outcome import WaitResult

DEFAULT = resume.DEFAULT_RESUME_ON


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (None, "succeeded"),
        (JobPreemptedError("evicted", reason="Evicted"), "preempted"),
        (JobDeletedError("deleted"), "deleted"),
        (JobTimeoutError("timeout"), "timeout"),
        (TrainerExitError("exit 3", exit_code=3), "trainer_failure"),
        (OOMKilledError("oom", exit_code=137), "trainer_failure"),
        (TrainerCrashLoopError("loop"), "trainer_failure"),
        (TrainingStalledError("stall"), "trainer_failure"),
        (JobFailedError("failed"), "trainer_failure"),
        (StoppedFromWandbError("stopped"), "stopped_from_wandb"),
        (JobUnschedulableError("pending"), "not_started"),
        (ImagePullError("pull"), "not_started"),
        # Nothing was submitted: there is no run to resume.
        (JobRefusedError("refused"), "not_started"),
        (JobWontFitError("too big"), "not_started"),
        (ApiserverUnreachableError("lost"), "unknown"),
        (RuntimeError("a bug"), "unknown"),
    ],
)
def test_each_failure_class_names_its_cause(error, cause) -> None:
    assert resume.cause_of(error) == cause


def _raised_by_a_failed_wait() -> set[type[BaseException]]:
    """Every class ``for_failure`` raises: each failed outcome, alone and with each cause."""
    causes = [None, *(Classification(kind) for kind in Ending if not kind.succeeded)]
    return {
        type(failure_exception.for_failure(WaitResult(outcome, "j", "ns", "u1", "m"), "m", cause))
        for outcome in Ending
        if not outcome.succeeded
        for cause in causes
    }


def test_every_class_a_failed_wait_raises_names_the_cause_it_stands_for() -> None:
    # Not inherited: a new class decides, rather than passing for its base's trainer failure.
    raised = _raised_by_a_failed_wait()
    unnamed = sorted(cls.__name__ for cls in raised if "resume_cause" not in vars(cls))
    assert unnamed == []
    known = {
        *resume.RESUMABLE,
        exceptions.STOPPED_FROM_WANDB,
        exceptions.NOT_STARTED,
        exceptions.UNKNOWN,
    }
    assert {resume.cause_of(cls("m")) for cls in raised} <= known


RECORD = RunRecord("run1abc", 1, "uid-1")


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        ("preempted", Resumption("run1abc", 1, "preempted", "must")),
        ("killed", Resumption("run1abc", 1, "killed", "allow")),
        ("trainer_failure", None),
        ("stopped_from_wandb", None),
        ("not_started", None),
        ("timeout", None),
        ("deleted", None),
        ("succeeded", None),
        ("unknown", None),
        (None, None),
    ],
)
def test_by_default_only_a_preemption_or_a_kill_is_resumed(cause, expected) -> None:
    assert resume.resume_of(RECORD, cause, DEFAULT) == expected


def test_a_trainer_failure_is_resumed_when_the_dag_says_so() -> None:
    policy = resume.resume_on("preempted,trainer_failure")
    assert resume.resume_of(RECORD, "trainer_failure", policy) == Resumption(
        "run1abc", 1, "trainer_failure", "must"
    )
    assert resume.resume_of(RECORD, "killed", policy) is None


def test_no_record_or_an_empty_policy_resumes_nothing() -> None:
    assert resume.resume_of(None, "preempted", DEFAULT) is None
    assert resume.resume_of(RECORD, "preempted", resume.resume_on("")) is None
    assert resume.resume_of(RECORD, "preempted", resume.resume_on(None)) is None


def test_a_kill_in_the_triggerer_is_told_by_the_remembered_job_being_gone() -> None:
    # The record has no cause: the try reported nothing.
    assert resume.interrupted_by(RECORD, "uid-1", job_gone=True) == "killed"
    # Still there: the plan reattaches to it (or clears it) as without resume.
    assert resume.interrupted_by(RECORD, "uid-1", job_gone=False) is None
    # The store remembers another job than the record's: nothing is known of this one.
    assert resume.interrupted_by(RECORD, "uid-2", job_gone=True) is None
    reported = RunRecord("run1abc", 1, "uid-1", "trainer_failure")
    assert resume.interrupted_by(reported, "uid-1", job_gone=True) == "trainer_failure"


def test_resume_on_takes_a_list_or_a_rendered_string_and_refuses_unknown_causes() -> None:
    assert resume.resume_on(["preempted", "timeout"]) == ("preempted", "timeout")
    assert resume.resume_on(" preempted , killed ") == ("preempted", "killed")
    with pytest.raises(ValueError, match=r"'preemption'.*preempted, killed"):
        resume.resume_on(["preemption"])
    with pytest.raises(ValueError, match="stopped_from_wandb"):
        resume.resume_on("stopped_from_wandb")  # the user stopped it: never resumed


def test_the_record_survives_the_store_and_refuses_anything_else() -> None:
    done = RunRecord("run1abc", 2, "uid-1", "preempted")
    assert RunRecord.from_store(done.to_store()) == done
    assert RunRecord.from_store(RECORD.to_store()) == RECORD
    for bad in (None, "x", {"run_id": "r", "intent": "1", "uid": "u"}, {"run_id": "r"}):
        assert RunRecord.from_store(bad) is None


@pytest.mark.parametrize(
    ("head", "said"),
    [
        (  # the older contract's line: no seconds
            "[rank 0/2] joining\n[rank 0/2] resumed from step 593 (checkpoint "
            "/checkpoints/r1/step-000000593.pt)\n[rank 0/2] epoch 2/6",
            TrainerResumed(593, "/checkpoints/r1/step-000000593.pt"),
        ),
        (
            "[rank 0/2] resumed from step 593 (checkpoint /checkpoints/r1/step-000000593.pt) "
            "after 1234.5 s of training\n",
            TrainerResumed(593, "/checkpoints/r1/step-000000593.pt", 1234.5),
        ),
        (
            "resumed from step 7 (checkpoint /c/step-000000007.pt) after 12 s of training",
            TrainerResumed(7, "/c/step-000000007.pt", 12.0),
        ),
        (  # seconds that are no number: the step still counts, the seconds are not said
            "resumed from step 7 (checkpoint /c/step-000000007.pt) after many s of training",
            TrainerResumed(7, "/c/step-000000007.pt"),
        ),
        ("[rank 0/2] no checkpoint in /checkpoints/r1 yet: starting from step 0\n", None),
        ("resumed from step many (checkpoint x)", None),
        ("", None),
    ],
)
def test_the_resume_step_is_what_the_trainer_says_in_its_first_lines(head, said):
    assert resume.resumed_step(head) == said


def _job(*tasks: tuple[int, dict[str, str]]) -> dict:
    return {
        "spec": {
            "tasks": [
                {
                    "name": f"t{i}",
                    "replicas": replicas,
                    "template": {"spec": {"containers": [{"resources": {"limits": limits}}]}},
                }
                for i, (replicas, limits) in enumerate(tasks)
            ]
        }
    }


def test_a_jobs_gpus_are_every_tasks_replicas_times_its_pods_gpus():
    job = _job((1, {"nvidia.com/gpu": "8"}), (3, {"nvidia.com/gpu": "8", "cpu": "4"}))
    assert resume.job_gpus(job) == 32
    assert resume.job_gpus(_job((2, {"cpu": "1"}))) == 0  # a CPU job saves no GPU-seconds
    assert resume.job_gpus({"metadata": {"name": "j"}}) == 0


def test_the_saved_gpu_seconds_are_the_checkpoints_training_on_the_jobs_gpus():
    assert resume.saved_gpu_seconds(1234.56, 32) == 39505.9
    assert resume.saved_gpu_seconds(1234.5, 0) == 0.0
    assert resume.saved_gpu_seconds(-1.0, 8) == 0.0  # a clock gone backwards saves nothing


def test_a_resumed_job_never_takes_the_interrupted_jobs_name():
    assert (
        resume.resumed_job_name("wandb-job-0123456789abcdef", 2) == "wandb-job-0123456789abcdef-r2"
    )
    long = resume.resumed_job_name("a" * 44 + "-b", 12)
    assert long == "a" * 41 + "-r12" and len(long) <= MAX_JOB_NAME_LENGTH
    assert resume.resumed_job_name("x" * 41 + "-yyyy", 3) == "x" * 41 + "-r3"  # no "--"


@pytest.mark.parametrize(
    ("guess", "run_in_wandb", "settled"),
    [
        ("must", True, "must"),
        ("must", False, "allow"),  # preempted before wandb.init: must would fail the trainer
        ("allow", True, "must"),  # killed after wandb.init: the run is there to continue
        ("allow", False, "allow"),
        ("must", None, "must"),  # not asked (offline, no key) or no answer: the guess stands
        ("allow", None, "allow"),
    ],
)
def test_wandb_resume_is_settled_by_what_w_and_b_says_of_the_run(guess, run_in_wandb, settled):
    resumed = Resumption("run1abc", 1, "preempted", guess)
    assert resume.settled_by_wandb(resumed, run_in_wandb) == Resumption(
        "run1abc", 1, "preempted", settled
    )
