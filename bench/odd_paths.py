"""Odd paths a real deployment meets, each checked once on the local cluster.

``fixed-name``: one task instance of ``VolcanoPyTorchJobOperator`` with a fixed ``job_name``
runs try 1, whose master exits 3 (the job fails, is reported and stays for inspection), then
try 2 under the same name, which must replace that job and succeed. Writes
``{"ok": bool, "detail": str}`` as JSON (``--out``) for ``bench/run_all.py``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from airflow_volcano_wandb.testing.jobs import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    with_pod_annotations,
)

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"


class _TaskInstance(SimpleNamespace):
    """What ``execute()`` reads of a task instance, and where its XComs go."""

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


def _template(exit_code: str) -> dict[str, Any]:
    """The seed with a 1 s master ending with ``exit_code``; a failing pod ends the job."""
    template = with_pod_annotations(
        yaml.safe_load(SEED.read_text()),
        master={DURATION_ANNOTATION: "1", EXIT_CODE_ANNOTATION: exit_code},
    )
    for task in template["spec"]["tasks"]:
        task["template"]["spec"]["restartPolicy"] = "Never"
    template["spec"]["policies"] = [{"event": "PodFailed", "action": "TerminateJob"}]
    return template


def _try(namespace: str, try_number: int, exit_code: str) -> dict[str, Any]:
    from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator

    operator = VolcanoPyTorchJobOperator(
        task_id="train",
        template=_template(exit_code),
        image_uri="example.org/bench/trainer:1",
        namespace=namespace,
        job_name="bench-fixed-name",
        replicas={"worker": 0},
        wandb_entity="bench",
        wandb_project="bench",
        wandb_mode="offline",
        poll_interval=1,
    )
    ti = _TaskInstance(
        dag_id="bench_odd_paths",
        task_id="train",
        run_id=f"fixed-{namespace}",
        map_index=-1,
        try_number=try_number,
        log_url=None,
        xcoms={},
    )
    return operator.execute({"ti": ti, "dag_run": SimpleNamespace(logical_date=None)})


def fixed_name(namespace: str) -> dict[str, Any]:
    try:
        _try(namespace, 1, "3")
        return {"ok": False, "detail": "try 1 succeeded; its master was to exit 3"}
    except Exception as exc:  # the expected failure of try 1
        first = f"{type(exc).__name__}"
    try:
        result = _try(namespace, 2, "0")
    except Exception as exc:
        return {"ok": False, "detail": f"try 2 failed after try 1's {first}: {exc}"}
    return {"ok": result.get("phase") == "Completed", "detail": f"try 2 ended {result['phase']}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", choices=["fixed-name"])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()
    Path(options.out).write_text(json.dumps(fixed_name(options.namespace)))


if __name__ == "__main__":
    main()
