"""W&B Launch queue references, wandb-queue://entity/queue (wandb/wandb_queue_ref.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_volcano_wandb.wandb.wandb_queue_ref import WandbQueueRef, is_queue_ref, parse_queue_ref

# -- queue references -------------------------------------------------------------------------


def test_parse_queue_ref() -> None:
    assert parse_queue_ref("wandb-queue://team/volcano-queue") == WandbQueueRef(
        "team", "volcano-queue"
    )
    assert parse_queue_ref("wandb-queue://team/my%20queue").queue == "my queue"
    assert is_queue_ref("wandb-queue://team/q") and is_queue_ref("WANDB-QUEUE://team/q")
    assert not is_queue_ref("seed/volcano.yaml") and not is_queue_ref({"kind": "Job"})


@pytest.mark.parametrize(
    "bad",
    [
        "wandb-queue://team",
        "wandb-queue://team/",
        "wandb-queue:///queue",
        "wandb-queue://team/a/b",
        "wandb-queue://team/q?x=1",
        "wandb-queue://team/q#frag",
        "wandb-queue:team/q",
        "https://team/q",
    ],
)
def test_parse_queue_ref_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_queue_ref(bad)


@given(
    entity=st.text(min_size=1, max_size=30).filter(str.strip),
    queue=st.text(min_size=1, max_size=30).filter(str.strip),
)
def test_queue_ref_round_trips(entity: str, queue: str) -> None:
    ref = WandbQueueRef(entity, queue)
    assert parse_queue_ref(str(ref)) == ref
