"""What the trials on real pods (``tests/realpods``) share: the seed placed on the real node,
jobs whose ranks run a script, a try of the example trainer long enough to kill, the kill, and
the check that a resumed run continues the killed one's history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from airflow_volcano_wandb.testing.cluster import image, placement, wandb_offline
from test_support import operator_tries as support
from test_support.cluster_jobs import SEED, custom, job_pods, list_jobs, wait_until


def pod_log(core: k8s.CoreV1Api, ns: str, name: str) -> str:
    """The pod's log as text (the client's own ``str`` is the repr of the bytes it read)."""
    return core.read_namespaced_pod_log(name, ns, _preload_content=False).data.decode()


def placed_seed() -> dict[str, Any]:
    return placement.place_on_real_node(yaml.safe_load(SEED.read_text()))


def rank_job(name: str, namespace: str, script: str, restart: str = "OnFailure") -> dict[str, Any]:
    """The seed placed on the real node, every rank running ``python3 -c script``."""
    job = placed_seed()
    job["metadata"] = {"name": name, "namespace": namespace}
    for task in job["spec"]["tasks"]:
        pod = task["template"]["spec"]
        pod["restartPolicy"] = restart
        for container in pod["containers"]:
            container["image"] = image.TRAINER_IMAGE
            container["command"] = ["python3", "-c", script]
    return job


def killable_try(
    namespace: str, store: support.MemoryStore, ti: support.StubTaskInstance, **kwargs: Any
) -> Any:
    """One try of a master and a worker training the example trainer on the real node (sync
    wait), long enough to kill in the middle: a few seconds an epoch there, 60 s of grace to
    save on SIGTERM; ``kwargs`` say where its checkpoints go and how it waits."""
    template = placed_seed()
    for task in template["spec"]["tasks"]:
        task["replicas"] = 1
    op = support.operator(
        namespace=namespace,
        template=template,
        image_uri=image.TRAINER_IMAGE,
        allowed_images=[image.TRAINER_IMAGE],
        env={"TRAIN_EPOCHS": "6", "TRAIN_TRAIN_SAMPLES": "65536"},
        checkpoint_grace=60,
        deferrable=False,
        **kwargs,
    )
    return op.execute({**support.context_for(ti), "task_state_store": store})


def kill(api: k8s.ApiClient, namespace: str, name: str) -> None:
    """Delete the job as the trigger's kill does, and wait until its pods are gone too: the
    job object goes first, and its ranks save on SIGTERM while their pods terminate."""
    custom(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", name
    )

    def gone() -> bool:
        return not list_jobs(api, namespace) and not job_pods(api, namespace, name)

    wait_until(gone, 120, what="the killed job and its pods gone")


def completed(api: k8s.ApiClient, namespace: str) -> bool:
    """Whether the namespace's one job is ``Completed``."""
    [current] = list_jobs(api, namespace)
    return current.get("status", {}).get("state", {}).get("phase") == "Completed"


def gang_of_two(name: str, namespace: str, script: str) -> dict[str, Any]:
    """A master and a worker running ``script``, both needed to start (``minAvailable`` 2), as
    an operator's template (no namespace: the operator's ``namespace=`` places it)."""
    template = rank_job(name, namespace, script)
    del template["metadata"]["namespace"]
    for task in template["spec"]["tasks"]:
        task["replicas"] = 1
    template["spec"]["minAvailable"] = 2
    return template


def one_continuous_history(killed_file: Path, resumed_file: Path, saved: int) -> list[int]:
    """The steps the resumed run logged, once checked to continue the killed one's: the
    SIGTERM's save is the last step the killed try logged, so nothing is trained twice."""
    killed = [r["train/step"] for r in wandb_offline.history(killed_file) if "train/loss" in r]
    resumed = [r["train/step"] for r in wandb_offline.history(resumed_file) if "train/loss" in r]
    assert killed[-1] == saved and resumed[0] == saved + 1, (killed[-3:], resumed[:3])
    assert killed + resumed == list(range(1, resumed[-1] + 1))
    return resumed
