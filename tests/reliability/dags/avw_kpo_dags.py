"""``KubernetesPodOperator(deferrable=True)`` at its defaults, the operator users would pick
instead of the provider's, measured beside it by ``e2e_real_airflow`` (issue 42).

One pod in the run's namespace, on the local cluster's simulated nodes: it runs
``params.runs_s`` seconds and is placed by Volcano's scheduler, whose podgroup controller
gives a bare pod a group of its own (the local cluster runs no default scheduler).
``kubernetes_default`` is the cluster's kubeconfig, as for the provider. The file imports
what a user's KPO DAG imports and nothing else, since every task process parses it.

One change to KPO: its log read after the pod ended follows the log (``trigger_reentry``), and
the simulated kubelet (KWOK 0.8) never ends a follow, even of a container that has exited,
where a real kubelet sends the log and ends. So the log is read once without following: what
a real kubelet's follow returns for a container that has exited.
"""

from __future__ import annotations

import pendulum
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG

#: How long the simulated container runs: the KWOK stage's annotation (DURATION_ANNOTATION of
#: airflow_volcano_wandb.testing.cluster, not imported here: it would weigh on KPO's parse).
SIM_DURATION = "sim.airflow-volcano-wandb.io/duration"


class KubernetesPodOperatorOnKwok(KubernetesPodOperator):
    def _write_logs(self, pod, follow: bool = False, since_time=None) -> None:
        super()._write_logs(pod, follow=False, since_time=since_time)


with DAG(
    dag_id="avw_kpo_deferred",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"namespace": "default", "runs_s": "1"},
):
    KubernetesPodOperatorOnKwok(
        task_id="train",
        name="kpo-train",
        namespace="{{ params.namespace }}",
        image="example.org/avw/trainer:test",
        annotations={SIM_DURATION: "{{ params.runs_s }}"},
        schedulername="volcano",
        deferrable=True,
        retries=0,
    )
