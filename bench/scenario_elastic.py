"""Bench ``elastic``: elastic workers against today's restart on the real node (issue 51 goal
4), run by ``make bench REAL_PODS=1`` (``--only elastic``; a cluster without the real node
keeps the figures it had). The node's capacity is three worker slots, an extended resource
the harness sets (``test_support/elastic_trials.py``); each trial trains the example trainer
under torchrun and reads the times of its steps from its W&B offline history:

* ``grow``: 4 workers asked with 3 slots: seconds from the job's creation to its first step
  on 3, and from a fourth slot to the first step on 4;
* ``elastic`` and ``restart``: 3 workers on 3 slots, one worker's pod deleted with its slot
  gone, the slot given back 90 s later: seconds from the loss to training again, the step it
  resumed from against the last checkpoint, and the slot-seconds the survivors (the master
  and 2 workers, one GPU each on a GPU node) held idle meanwhile.
"""

from __future__ import annotations

import json
import time
from typing import Any

from common import REPO, say

KEYS = ("elastic",)
NEEDS = "cluster"
NAMESPACE = "avw-bench-elastic"
SLOT_BACK_S = 90.0


def run(ctx) -> dict | None:
    import sys

    from kubernetes import client as k8s
    from kubernetes import config

    from airflow_volcano_wandb.testing.cluster import cluster as local_cluster
    from airflow_volcano_wandb.testing.cluster import placement

    sys.path.insert(0, str(REPO))
    from test_support import elastic_trials as trials

    if not ctx.cluster.real_node:
        say("elastic: the cluster has no real node (make bench REAL_PODS=1): not run")
        return None
    state_dir = ctx.cluster.state_dir
    api = config.new_client_from_config(config_file=str(ctx.cluster.kubeconfig))
    core = k8s.CoreV1Api(api)
    server = json.loads((state_dir / "state.json").read_text())["server"]
    kube = local_cluster.admin_client(state_dir, server)
    figures: dict[str, Any] = {}
    for name, how in (
        ("elastic", lambda t: trials.lose_one(t, core, True, SLOT_BACK_S)),
        ("restart", lambda t: trials.lose_one(t, core, False, SLOT_BACK_S)),
        ("grow", lambda t: trials.grow(t, core)),
    ):
        namespace = f"{NAMESPACE}-{name}"
        try:
            core.create_namespace({"metadata": {"name": namespace}})
        except k8s.ApiException as exc:
            if exc.status != 409:
                raise
        trial = trials.Trial(api, namespace, placement.wandb_dir(kube, state_dir, namespace))
        started = time.monotonic()
        try:
            figures[name] = {**how(trial), "trial_s": round(time.monotonic() - started, 1)}
        finally:
            trial.delete()
            trials.clear_slots(core)
        say(f"elastic: {name} {figures[name]}")
    figures["slot_back_after_s"] = SLOT_BACK_S
    return {"elastic": figures}


def section(r: dict) -> list[str]:
    e = r["elastic"]
    el, rs, gr = e["elastic"], e["restart"], e["grow"]
    return [
        "`bench/scenario_elastic.py`: the real node limited to 3 worker slots; a worker's pod "
        f"deleted with its slot gone, the slot back {e['slot_back_after_s']:g} s later.",
        "",
        "| | loss to training again | world after | resumed from step (steps trained twice) "
        "| slot-seconds idle |",
        "| --- | --- | --- | --- | --- |",
        f"| `elastic=(1, 3)` | {el['loss_to_training_s']} s | {el['world_size_after_loss']} "
        f"| {el['resumed_from_step']} ({el['steps_trained_twice']}) "
        f"| {el['idle_slot_seconds']} |",
        f"| fixed (restart) | {rs['loss_to_training_s']} s | 4 "
        f"| {rs['resumed_from_step']} ({rs['steps_trained_twice']}) "
        f"| {rs['idle_slot_seconds']} |",
        "",
        f"Grow: 4 workers asked with 3 slots, first step on 3 {gr['start_on_3_s']} s after "
        f"the job's creation; a fourth slot, first step on 4 {gr['grow_to_4_s']} s later. "
        f"The lost worker back in the elastic world {el['slot_back_to_rejoined_s']} s after its "
        "slot (`None`: not within 180 s).",
    ]


def goals(figures: dict) -> list[str]:
    lost = figures["elastic"]["loss_to_training_s"]
    repeated = figures["elastic"]["steps_repeated_beyond_checkpoint"]
    ok = lost < 60 and repeated == 0
    return [
        f"elastic: a lost worker's peers train again within 60 s, 0 steps repeated beyond the "
        f"checkpoint ({lost} s, {repeated} steps): {'met' if ok else 'MISSED'}"
    ]
