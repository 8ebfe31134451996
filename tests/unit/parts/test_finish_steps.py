"""The steps of a finished wait (``parts/finish.py``): one table, whose order is the
behaviour: what a later try, the W&B run or the cleanup reads is written before it reads it."""

from __future__ import annotations

import dataclasses

from airflow_volcano_wandb.parts.finish import FINISH_STEPS, Finishing
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.training_progress import METRICS_XCOM
from test_support.operator_tries import StubTaskInstance


def _order() -> list[str]:
    return [step.__name__ for step in FINISH_STEPS]


def test_a_finished_wait_takes_its_steps_in_this_order():
    assert _order() == [
        "mask_key",
        "note_job",
        "mark_reported",
        "fetch_job",
        "find_run",
        "push_metrics",
        "fail",
        "log_success",
        "push_gpu_seconds",
        "say_resumed",
        "show_master_tail",
        "tell_ended",
        "delete",
        "push_summary",
        "annotate_outlets",
    ]


def test_each_step_is_a_method_of_the_finishing_wait_and_taken_once():
    assert all(
        getattr(Finishing, name) is step for name, step in zip(_order(), FINISH_STEPS, strict=True)
    )
    assert len(set(_order())) == len(FINISH_STEPS)


def test_the_job_is_read_and_the_next_try_told_before_it_is_deleted():
    order = _order()
    assert order.index("mask_key") == 0  # before any line a resumed process logs
    assert order.index("mark_reported") < order.index("fetch_job")
    assert order.index("find_run") < order.index("fail")  # a failure links back to its run
    assert order.index("push_metrics") < order.index("fail")  # a failed job's chart is kept too
    for before_delete in ("push_gpu_seconds", "show_master_tail", "tell_ended"):
        assert order.index(before_delete) < order.index("delete")
    assert order.index("push_summary") < order.index("annotate_outlets")


def test_the_kept_metrics_are_pushed_as_their_xcom_and_none_without_them_with_a_stub_ti():
    """The followed master log's sampled metrics (``WaitResult.metrics``): the Training tab's
    chart once the pods are gone; a wait that kept none pushes nothing."""
    ended = WaitResult.watch_lost("j", "ns", "u-1", "gone")
    for metrics in ({"train/epoch_loss": [[100, 1.25], [200, 0.5]]}, {}):
        ti = StubTaskInstance("dag", "train", "run")
        result = dataclasses.replace(ended, metrics=metrics)
        Finishing(None, result, {"ti": ti}, run=None, resumed=False).push_metrics()
        assert ti.pushed == ({METRICS_XCOM: metrics} if metrics else {})
