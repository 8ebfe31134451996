"""The elastic trials on the real node (issue 51 goal 4), shared by ``tests/realpods`` and
``bench/scenario_elastic.py``: the node's capacity is limited to a few workers by an extended
resource this harness sets on it (:data:`SLOT`, which the trials' worker pods ask for), so a
lost worker's pod cannot come back until a slot is given back.

Each trial renders the example trainer's job with the provider's renderer (``elastic=`` or
not), submits it, and reads the master's W&B offline history (every step logged, with its
time): when it trained, at which world size, from which step. Times are the node's clock.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from airflow_volcano_wandb.template import render_job
from airflow_volcano_wandb.testing.cluster import image, placement, wandb_offline
from test_support.cluster_jobs import custom, job_pods, wait_until
from test_support.real_pods import placed_seed

#: The extended resource that stands for a worker's GPUs: one a worker pod.
SLOT = "airflow-volcano-wandb.io/worker-slot"
#: A checkpoint every this many steps; every step is logged.
CHECKPOINT_EVERY = 20
#: How long a trial waits for a worker to join (grow, rejoin) before it records ``None``.
GROW_WAIT_S = 180.0
#: Samples and epochs: long enough on the shared cores for a loss, a wait and a rejoin.
TRAIN_ENV = {
    "TRAIN_EPOCHS": "40",
    "TRAIN_TRAIN_SAMPLES": "8192",
    "TRAIN_BATCH_SIZE": "64",
    "TRAIN_LOG_EVERY": "1",
    "AVW_CHECKPOINT_EVERY": str(CHECKPOINT_EVERY),
}


def set_slots(core: k8s.CoreV1Api, count: int) -> None:
    """Advertise ``count`` worker slots on the real node (its status capacity), as the
    Kubernetes docs' "advertise an extended resource" does, and wait until it shows."""
    body = {"status": {"capacity": {SLOT: str(count)}, "allocatable": {SLOT: str(count)}}}
    core.patch_node_status(placement.NODE_NAME, body)

    def shown() -> bool:
        node = core.read_node(placement.NODE_NAME)
        return (node.status.allocatable or {}).get(SLOT) == str(count)

    wait_until(shown, 30, what=f"{count} worker slots on the node")


def clear_slots(core: k8s.CoreV1Api) -> None:
    """Take the slots off the node again (a JSON patch removes the keys)."""
    key = SLOT.replace("/", "~1")
    ops = [
        {"op": "remove", "path": f"/status/{part}/{key}"} for part in ("capacity", "allocatable")
    ]
    node = core.read_node(placement.NODE_NAME)
    if SLOT in (node.status.capacity or {}):
        core.patch_node_status(placement.NODE_NAME, ops)


def trial_job(
    namespace: str, run_id: str, workers: int, elastic: tuple[int, int] | None
) -> dict[str, Any]:
    """The example trainer's job, rendered: ``workers`` worker pods each asking for a slot,
    the master none; every step logged to the run ``run_id`` (offline, on the claim) and a
    checkpoint every :data:`CHECKPOINT_EVERY` steps there."""
    template = placed_seed()
    template["metadata"]["namespace"] = namespace
    for task in template["spec"]["tasks"]:
        container = task["template"]["spec"]["containers"][0]
        env = {
            **TRAIN_ENV,
            "WANDB_RUN_ID": run_id,
            "WANDB_PROJECT": "elastic-trials",
            "AVW_CHECKPOINT_DIR": f"{placement.WANDB_MOUNT}/{run_id}",
            # A restarted rank of a fixed job resumes from the newest checkpoint too.
            "AVW_RESUME_FROM": "latest",
        }
        container["env"] = [*container["env"], *({"name": k, "value": v} for k, v in env.items())]
        if task["name"] == "worker":
            task["replicas"] = workers
            container["resources"] = {"limits": {SLOT: "1"}, "requests": {SLOT: "1"}}
    macros = {
        "image_uri": image.TRAINER_IMAGE,
        "run_id": run_id,
        "run_name": run_id,
        "entity_name": "avw",
        "project_name": "elastic-trials",
        "author": "airflow",
    }
    return render_job(
        template,
        macros=macros,
        elastic=elastic,
        torchrun_env=True,
        template_namespace_allowed=True,
        allowed_images=[image.TRAINER_IMAGE],
        shm_size=None,
    )


@dataclass
class Step:
    step: int
    at: float
    world_size: int | None
    #: When the process that logged it logged its first step (a new process: a new world).
    started: float = 0.0


@dataclass
class Trial:
    """One submitted job and what its master's run logged."""

    api: k8s.ApiClient
    namespace: str
    wandb_dir: Path
    run_id: str = field(default_factory=lambda: f"el{uuid.uuid4().hex[:8]}")
    name: str = ""
    #: Every checkpoint step seen on the claim (the trainer keeps only its newest three).
    saved: set[int] = field(default_factory=set)

    def submit(self, workers: int, elastic: tuple[int, int] | None) -> float:
        job = trial_job(self.namespace, self.run_id, workers, elastic)
        self.name = job["metadata"]["name"]
        custom(self.api).create_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", self.namespace, "jobs", job
        )
        return time.time()

    def steps(self) -> list[Step]:
        """Every logged training step, in the order logged, with its world size (the last one
        its run file logged before it) and when its process's first step was."""
        out: list[Step] = []
        for run_file in sorted(wandb_offline.find_run_files(self.wandb_dir, self.run_id)):
            world, first = None, None
            for record in wandb_offline.history(run_file):
                world = record.get("elastic/world_size", world)
                if "train/loss" in record:
                    at = float(record["_timestamp"])
                    first = at if first is None else first
                    out.append(Step(int(record["train/step"]), at, world, first))
        return out

    def checkpoints(self) -> list[int]:
        folder = self.wandb_dir / self.run_id
        self.saved |= {int(p.name[5:14]) for p in folder.glob("step-*.pt")}
        return sorted(self.saved)

    def running_workers(self) -> list[str]:
        return sorted(
            pod.metadata.name
            for pod in job_pods(self.api, self.namespace, self.name)
            if "-worker-" in pod.metadata.name
            and pod.status.phase == "Running"
            and not pod.metadata.deletion_timestamp
        )

    def lose(self, pod: str) -> float:
        """Delete a worker's pod at once (a lost node: no grace to finish a step)."""
        k8s.CoreV1Api(self.api).delete_namespaced_pod(pod, self.namespace, grace_period_seconds=0)
        return time.time()

    def trained_after(self, moment: float, world: int | None = None) -> Step | None:
        """The first step of a process started after ``moment`` (each world's processes are
        new: a re-formation or a restart), at world size ``world`` when given."""
        self.checkpoints()  # seen while it waits: a checkpoint may go before it is read
        for step in self.steps():
            if step.started > moment and (world is None or step.world_size == world):
                return step
        return None

    def delete(self) -> None:
        if self.name:
            custom(self.api).delete_namespaced_custom_object(
                "batch.volcano.sh", "v1alpha1", self.namespace, "jobs", self.name
            )


def wait_training(trial: Trial, after: float, timeout: float, world: int | None = None) -> Step:
    """The first step logged after ``after`` (at ``world``), waiting up to ``timeout`` s."""
    found: list[Step] = []

    def trained() -> bool:
        step = trial.trained_after(after, world)
        found[:] = [step] if step else []
        return bool(found)

    wait_until(trained, timeout, what=f"a step after {after:.0f} (world size {world})")
    return found[0]


def seconds_to_training(
    trial: Trial, after: float, timeout: float, world: int | None = None
) -> float | None:
    """Seconds from ``after`` to the first step at ``world``; ``None``: none within
    ``timeout`` (a figure, not a failure: the trial's other figures still count)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        step = trial.trained_after(after, world)
        if step is not None:
            return round(step.at - after, 1)
        time.sleep(2)
    return None


def grow(trial: Trial, core: k8s.CoreV1Api) -> dict[str, Any]:
    """(a) 4 workers asked, 3 slots free: training starts on 3; a fourth slot: it grows."""
    set_slots(core, 3)
    created = trial.submit(4, (2, 4))
    first = wait_training(trial, created, 600, world=4)  # master + 3 workers
    added = time.time()
    set_slots(core, 4)
    return {
        "start_on_3_s": round(first.at - created, 1),
        "grow_to_4_s": seconds_to_training(trial, added, GROW_WAIT_S, world=5),
        "workers_while_3_free": 3,
    }


def lose_one(trial: Trial, core: k8s.CoreV1Api, elastic: bool, back_after: float) -> dict:
    """(b)/(c) 3 workers on 3 slots; a worker pod deleted with its slot gone (2 slots), the
    slot given back ``back_after`` s later: when it trained again, at which world size, and
    the steps trained twice beyond the last checkpoint before the loss."""
    set_slots(core, 3)
    created = trial.submit(3, (1, 3) if elastic else None)
    wait_training(trial, created, 600, world=4 if elastic else None)
    wait_until(lambda: trial.checkpoints(), 300, what="a first checkpoint")
    set_slots(core, 2)
    lost = trial.lose(trial.running_workers()[-1])
    back = lost + back_after
    # The slot comes back on the clock, whether or not the job trains meanwhile.
    timer = threading.Timer(back_after, set_slots, (core, 3))
    timer.start()
    try:
        again = wait_training(trial, lost, back_after + 600)
    finally:
        timer.join()
    # The last step the world before the loss trained (its processes started before it; the
    # survivors may finish a step and save as torchrun stops them).
    last_before = max(s.step for s in trial.steps() if s.started < lost)
    resumed = again.step - 1
    saved = max((c for c in trial.checkpoints() if c <= resumed), default=-1)
    rejoined = seconds_to_training(trial, back, GROW_WAIT_S, world=4) if elastic else None
    survivors = 3  # the master and the two workers left: each holds its slot (its GPU)
    return {
        "loss_to_training_s": round(again.at - lost, 1),
        "world_size_after_loss": again.world_size,
        "resumed_from_step": resumed,
        "resumed_from_checkpoint": saved,
        "last_step_before_loss": last_before,
        # Steps trained again: none beyond the checkpoint it resumed from, and those between
        # that checkpoint and the last step before the loss (0 when the survivors saved it).
        "steps_repeated_beyond_checkpoint": max(0, resumed - saved),
        "steps_trained_twice": max(0, last_before - resumed),
        "idle_slot_seconds": round(survivors * (again.at - lost), 1),
        # An elastic job's worker rejoining once its slot is back (a fixed job's training
        # again is already after it).
        "slot_back_to_rejoined_s": rejoined,
    }
