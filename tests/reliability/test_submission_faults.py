"""SIGKILL, SIGTERM or ``execution_timeout`` at every step of submission; then the next try.

Each trial forks a process that runs ``VolcanoPyTorchJobOperator.execute`` (deferrable) for a
task instance of its own against the local cluster, and injects one fault at one *step*: just
before or just after one of the calls submission makes (every ``VolcanoHook`` call, the task
state store's write, every XCom push). A first dry run counts the steps. The faults are the
ones Airflow delivers:

- ``sigkill``: the process dies on the spot (OOM killer, a lost node);
- ``sigterm``: Airflow's task runner handles SIGTERM by calling ``on_kill`` in the signal
  handler, and execution goes on until the supervisor's SIGKILL (at the next step here);
- ``timeout``: Airflow's ``timeout`` context raises ``AirflowTaskTimeout`` from SIGALRM, and
  ``_execute_task`` calls ``on_kill`` and fails the try (the real ``timeout`` class, a real
  SIGALRM, at that step).

Then the next try (try 2) runs in the test process with the same task state store, up to its
deferral. After it: **0 unwatched jobs** (the task instance has exactly one live job, the
one the new try's trigger waits on) and **0 unowned Secrets** (the key's Secret is single,
owned by that job; no Secret in the namespace lacks a live owner).

``AVW_SUBMISSION_FAULT_TRIALS=all`` (``make test-lifecycle``) runs every fault at every step
(more than 50 trials); the default suite runs a fixed handful spread over the steps.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR, TaskInstanceIdentity
from test_support import operator_tries as support

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

DAG_ID = "avw_rel_submit_faults"
FAULTS = ("sigkill", "sigterm", "timeout")
HOOK_CALLS = (
    "list_jobs",
    "get_job",
    "create_job",
    "set_job_annotations",
    "delete_job",
    "create_secret",
)
#: (fault, step) pairs of the default suite: before/after the first list, the create and the
#: Secret, and the XCom pushes, spread over the three faults.
DEFAULT_TRIALS = 6


class FileStore:
    """A task state store that outlives the forked try, as Airflow's does (the metadata DB)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get(self, key: str, default: Any = None) -> Any:
        if not self.path.exists():
            return default
        return json.loads(self.path.read_text()).get(key, default)

    def set(self, key: str, value: Any) -> None:
        data = json.loads(self.path.read_text()) if self.path.exists() else {}
        data[key] = value
        self.path.write_text(json.dumps(data))


def _context(ti: support.StubTaskInstance, store: FileStore) -> dict[str, Any]:
    return {**support.context_for(ti), "task_state_store": store}


def _first_try(namespace: str, run_id: str, store: FileStore, fault: str, step: int, out: Path):
    """Fork; the child runs try 1 with ``fault`` at boundary ``step``; its wait status.

    The child writes how many boundaries it passed to ``out`` (for the dry run).
    """
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        return status
    try:  # the child: never returns to pytest
        from airflow.sdk.exceptions import AirflowTaskTimeout, TaskDeferred
        from airflow.sdk.execution_time.timeout import timeout

        op = support.master_only_operator(namespace)
        ti = support.StubTaskInstance(DAG_ID, "train", run_id)
        state = {"passed": 0, "terminated": False, "in_on_kill": False}

        def boundary() -> None:
            if state["in_on_kill"]:
                return  # the supervisor grants on_kill its grace
            if state["terminated"]:
                os.kill(os.getpid(), signal.SIGKILL)  # the supervisor's escalation
            state["passed"] += 1
            out.write_text(str(state["passed"]))
            if state["passed"] != step:
                return
            if fault == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif fault == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            else:
                os.kill(os.getpid(), signal.SIGALRM)  # the timeout's alarm, now

        def around(call):
            def wrapped(*args, **kwargs):
                boundary()
                result = call(*args, **kwargs)
                boundary()
                return result

            return wrapped

        for name in HOOK_CALLS:
            setattr(VolcanoHook, name, around(getattr(VolcanoHook, name)))
        ti.xcom_push = around(ti.xcom_push)
        store.set = around(store.set)

        def on_term(signum, frame):  # as Airflow's task runner does
            state["in_on_kill"] = True
            op.on_kill()
            state["in_on_kill"] = False
            state["terminated"] = True

        signal.signal(signal.SIGTERM, on_term)
        try:
            with timeout(3600):
                op.execute(_context(ti, store))
        except TaskDeferred:
            os._exit(0)
        except AirflowTaskTimeout:
            state["in_on_kill"] = True
            op.on_kill()  # as _execute_task does
            os._exit(4)
        except BaseException:
            os._exit(5)
        os._exit(0)
    finally:
        os._exit(3)


def _trials(steps: int) -> list[tuple[str, int]]:
    every = [(fault, step) for fault in FAULTS for step in range(1, steps + 1)]
    if os.environ.get("AVW_SUBMISSION_FAULT_TRIALS") == "all":
        return every
    stride = max(1, len(every) // DEFAULT_TRIALS)
    return every[stride // 2 :: stride][:DEFAULT_TRIALS]


def test_a_fault_at_any_submission_step_leaves_no_unowned_secret_nor_unwatched_job_with_a_stub_ti(
    kubernetes_connection, wandb_connection, volcano_cluster, volcano_namespace, tmp_path
):
    from airflow.sdk.exceptions import TaskDeferred

    namespace = volcano_namespace
    api = volcano_cluster.api_client()
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)

    dry = tmp_path / "dry.count"
    status = _first_try(namespace, "dry", FileStore(tmp_path / "dry.store"), "none", 0, dry)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    steps = int(dry.read_text())
    assert steps >= 10, steps  # list, create, Secret, store, XComs: before and after each
    trials = _trials(steps)
    print(f"{steps} steps, {len(trials)} trials")

    ended: dict[str, int] = {}
    for n, (fault, step) in enumerate(trials):
        run_id = f"t{n:02d}-{fault}-{step}"
        store = FileStore(tmp_path / f"{run_id}.store")
        status = _first_try(namespace, run_id, store, fault, step, tmp_path / f"{run_id}.count")
        how = (
            signal.Signals(os.WTERMSIG(status)).name
            if os.WIFSIGNALED(status)
            else f"exit {os.WEXITSTATUS(status)}"
        )
        ended[f"{fault}:{how}"] = ended.get(f"{fault}:{how}", 0) + 1
        assert how != "exit 3" and how != "exit 5", (run_id, how)  # the harness or the try broke

        identity = TaskInstanceIdentity(DAG_ID, "train", run_id)
        retry = support.StubTaskInstance(DAG_ID, "train", run_id, try_number=2)
        with pytest.raises(TaskDeferred) as deferred:
            support.master_only_operator(namespace).execute(_context(retry, store))
        uid = deferred.value.trigger.job_uid

        def mine(identity=identity):
            return [
                j
                for j in support.list_jobs(api, namespace)
                if (j["metadata"].get("labels") or {}).get("airflow-volcano-wandb.io/task-instance")
                == identity.digest
            ]

        live = [j for j in mine() if not j["metadata"].get("deletionTimestamp")]
        assert [j["metadata"]["uid"] for j in live] == [uid], (run_id, live)  # 0 unwatched
        support.wait_until(lambda: len(mine()) == 1, 120, what=f"{run_id}: the dying job gone")
        [secret] = support.wait_until(
            lambda identity=identity: (
                s
                if len(
                    s := core.list_namespaced_secret(
                        namespace, label_selector=identity.selector()
                    ).items
                )
                == 1
                else None
            ),
            60,
            what=f"{run_id}: one key Secret",
        )
        assert [o.uid for o in secret.metadata.owner_references or []] == [uid], run_id
        # Done with it: the next trial's checks stay about its own task instance.
        custom.delete_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", namespace, "jobs", live[0]["metadata"]["name"]
        )

    # 0 unowned Secrets in the whole namespace, once garbage collection has caught up.
    def unowned():
        uids = {j["metadata"]["uid"] for j in support.list_jobs(api, namespace)}
        secrets = core.list_namespaced_secret(namespace, label_selector=MANAGED_SELECTOR).items
        return [
            s.metadata.name
            for s in secrets
            if not {o.uid for o in s.metadata.owner_references or []} & uids
        ]

    support.wait_until(lambda: not unowned(), 120, what="no Secret without a live owner")
    print("first tries ended:", ended)
    api.close()
