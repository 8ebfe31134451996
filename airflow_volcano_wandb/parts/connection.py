"""Where the operator's and the sensor's job runs: the cluster (the connection and its
overrides) and the namespace.

The same four connection values build the sync hook in the task and the trigger's async hook
in the triggerer, so both ends always talk to the same cluster as the same identity.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.parts.options import option

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook


@dataclass(frozen=True, kw_only=True)
class Connection:
    """The cluster and namespace a shell's job runs in."""

    namespace: str | None = option(
        None,
        """where the job runs; else (the operator's) the template's ``metadata.namespace``
        (only for a template from the DAG: a W&B queue's must be in ``allowed_namespaces``),
        else the connection's namespace, else ``default``.""",
        templated=True,
    )
    kubernetes_conn_id: str | None = option(
        "kubernetes_default", "the cncf.kubernetes ``kubernetes`` connection."
    )
    config_file: str | None = option(None, "a kubeconfig path, overriding the connection's.")
    cluster_context: str | None = option(None, "a kubeconfig context, overriding the connection's.")
    in_cluster: bool | None = option(None, "use the in-cluster service account.")

    def kwargs(self) -> dict[str, Any]:
        """The hooks' (and the trigger's) connection arguments: all but the namespace."""
        return {name: value for name, value in asdict(self).items() if name != "namespace"}

    def hook(self) -> VolcanoHook:
        from airflow_volcano_wandb.hooks.volcano import VolcanoHook

        return VolcanoHook(**self.kwargs())
