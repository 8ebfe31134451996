"""The doctor's checks of the Airflow side (pure): where jobs run, which components need the
provider and whether a triggerer is needed, and what W&B said of the key.

Pure functions over what ``doctor_reads`` fetched, as the cluster checks in ``doctor.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_volcano_wandb.cli.report import FAIL, OK, WARN, Result

#: The seed template's ``metadata.namespace``, which ``docker/k8s/``'s namespace and Role use
#: too (tests/unit/test_doctor_setup.py keeps the three equal).
SEED_NAMESPACE = "wandb"

#: Every Airflow component that imports the provider, and why.
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("scheduler", "imports the DAGs' operators; under LocalExecutor it runs the tasks"),
    ("workers", "run the tasks: render, submit, wait, clean up"),
    ("triggerer", "runs the deferred waits"),
    ("DAG processor", "imports the DAG files"),
    ("API server", "the wandb connection form and the W&B Run link"),
)


def jobs_namespace(
    explicit: str | None, template: Mapping[str, Any] | None, connection: str | None
) -> tuple[str, str]:
    """``(namespace, where it came from)``, in the operator's order for a DAG's template:
    ``--namespace``, else the template's ``metadata.namespace``, else the connection's, else
    ``default``. Without ``--template`` the template is the seed, whose namespace is
    :data:`SEED_NAMESPACE`."""
    if explicit:
        return explicit, "--namespace"
    if template is None:
        return SEED_NAMESPACE, "the seed template's"
    namespace = (template.get("metadata") or {}).get("namespace")
    if namespace:
        return str(namespace), "the template's"
    if connection:
        return connection, "the connection's"
    return "default", "no template or connection namespace"


def check_components(default_deferrable: bool) -> Result:
    """Which Airflow components need the provider, and whether a triggerer is needed."""
    where = ", ".join(name for name, _ in COMPONENTS)
    if default_deferrable:
        triggerer = (
            "a triggerer is needed: [operators] default_deferrable is True, so every task "
            "defers unless it says deferrable=False"
        )
    else:
        triggerer = (
            "a triggerer is needed only for tasks with deferrable=True "
            "([operators] default_deferrable is False)"
        )
    return Result("Airflow components", OK, f"install the provider on the {where}; {triggerer}")


def check_wandb_key(conn_id: str, works: bool | None, said: str) -> Result:
    """What W&B said when asked whether the connection's key works (``works`` is ``None``
    when it could not be asked or gave no answer in time); ``said`` never holds the key."""
    title = f"W&B connection {conn_id!r}"
    if works:
        return Result(title, OK, f"has an API key, and W&B accepts it ({said})")
    if works is False:
        return Result(
            title,
            FAIL,
            f"has an API key, and W&B refuses it: {said}",
            "put a valid API key in the connection's password (and its server in host), or "
            "run with WANDB_MODE=offline",
        )
    return Result(
        title,
        WARN,
        f"has an API key; W&B could not be asked whether it works: {said}",
        "check that this host reaches the connection's W&B server (egress to it, its host)",
    )
