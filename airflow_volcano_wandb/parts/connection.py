"""How the operator and the sensor reach the cluster: the connection and its overrides.

The same four values build the sync hook in the task and the trigger's async hook in the
triggerer, so both ends always talk to the same cluster as the same identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.parts.options import option

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook


@dataclass(frozen=True, kw_only=True)
class Connection:
    """The cluster a shell's job runs in."""

    kubernetes_conn_id: str | None = option(
        "kubernetes_default", "the cncf.kubernetes ``kubernetes`` connection."
    )
    config_file: str | None = option(None, "a kubeconfig path, overriding the connection's.")
    cluster_context: str | None = option(None, "a kubeconfig context, overriding the connection's.")
    in_cluster: bool | None = option(None, "use the in-cluster service account.")

    def kwargs(self) -> dict[str, Any]:
        """The hooks' (and the trigger's) connection arguments."""
        return {
            "kubernetes_conn_id": self.kubernetes_conn_id,
            "config_file": self.config_file,
            "cluster_context": self.cluster_context,
            "in_cluster": self.in_cluster,
        }

    def hook(self) -> VolcanoHook:
        from airflow_volcano_wandb.hooks.volcano import VolcanoHook

        return VolcanoHook(**self.kwargs())
