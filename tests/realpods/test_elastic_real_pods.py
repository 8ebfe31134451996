"""Elastic workers on real pods (issue 51 goal 4): the real node's capacity is limited to three
workers by an extended resource the harness sets (``test_support.elastic_trials.SLOT``), so a
lost worker's pod cannot come back until capacity is given back.

(a) asks for 4 workers with 3 free: starts at once on 3, grows to 4 when a fourth slot is
added; (b) a worker pod deleted mid-training with no capacity to replace it: training goes on
with the rest within 60 s from the last checkpoint, and the worker rejoins when capacity
returns; (c) the same loss without ``elastic``: today's restart, which waits for the slot.

Marked ``real_pods`` (``make test-real-pods``); each trial trains the example trainer for real
under torchrun's elastic launch (the image's torch 1.13) and reads its W&B offline history.
"""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from test_support import elastic_trials as trials

pytestmark = [pytest.mark.cluster, pytest.mark.real_pods]

#: When the lost worker's slot comes back after the loss, in (b) and (c).
SLOT_BACK_S = 90.0


@pytest.fixture
def trial(volcano_cluster, volcano_namespace, real_node):
    api = volcano_cluster.api_client()
    core = k8s.CoreV1Api(api)
    one = trials.Trial(api, volcano_namespace, real_node)
    yield one, core
    one.delete()
    trials.clear_slots(core)


def test_an_elastic_job_starts_on_the_3_free_workers_and_grows_to_4_on_real_pods(trial):
    one, core = trial
    figures = trials.grow(one, core)
    assert figures["workers_while_3_free"] == 3
    assert figures["grow_to_4_s"] is not None, figures


def test_a_lost_worker_leaves_the_rest_training_within_60_s_from_the_checkpoint_on_real_pods(
    trial,
):
    one, core = trial
    figures = trials.lose_one(one, core, elastic=True, back_after=SLOT_BACK_S)
    assert figures["loss_to_training_s"] < 60, figures
    assert figures["world_size_after_loss"] == 3, figures  # the master and 2 workers
    assert figures["steps_repeated_beyond_checkpoint"] == 0, figures
    assert figures["resumed_from_step"] == figures["resumed_from_checkpoint"], figures
    # The worker rejoined once its slot was back (world size 4 again).
    assert figures["slot_back_to_rejoined_s"] is not None, figures


def test_the_same_loss_without_elastic_restarts_and_waits_for_the_slot_on_real_pods(trial):
    one, core = trial
    figures = trials.lose_one(one, core, elastic=False, back_after=SLOT_BACK_S)
    # A fixed world trains again only once the lost rank's pod is back: after its slot.
    assert figures["loss_to_training_s"] >= SLOT_BACK_S, figures
    assert figures["steps_repeated_beyond_checkpoint"] == 0, figures
