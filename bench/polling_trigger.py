"""The polling baseline: what cncf.kubernetes triggers (2 s) and W&B Launch's agent (10 s) do.

Same hook (``AsyncVolcanoHook.get_job``), same reading of the status (``job_status``), same
event payload as ``VolcanoJobTrigger``; only the waiting differs: one GET per job per interval.
The hook is made once per trigger (so its kubeconfig is loaded once, as the cncf triggers
cache theirs); each GET opens its own client, as ``AsyncKubernetesHook.get_conn`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
from airflow_volcano_wandb.job.job_status import interpret
from airflow_volcano_wandb.wait.outcome import WaitResult


class PollingVolcanoJobTrigger(BaseTrigger):
    def __init__(
        self,
        job_name: str,
        namespace: str,
        poll_interval: float = 2.0,
        kubernetes_conn_id: str = "kubernetes_default",
    ) -> None:
        super().__init__()
        self.job_name = job_name
        self.namespace = namespace
        self.poll_interval = poll_interval
        self.kubernetes_conn_id = kubernetes_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_name": self.job_name,
                "namespace": self.namespace,
                "poll_interval": self.poll_interval,
                "kubernetes_conn_id": self.kubernetes_conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = AsyncVolcanoHook(conn_id=self.kubernetes_conn_id)
        while True:
            job = await hook.get_job(self.job_name, self.namespace)
            status = interpret(job, name=self.job_name, namespace=self.namespace)
            if status.terminal:
                yield TriggerEvent(WaitResult.from_status(status).to_event())
                return
            await asyncio.sleep(self.poll_interval)
