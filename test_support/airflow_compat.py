"""Airflow internals the tests use that moved between the supported Airflow 3 minors.

The provider's own version differences are in ``airflow_volcano_wandb/airflow_compat.py``;
these are scheduler-side names only the tests touch (parsing a DAG folder, serializing a DAG,
reading a serialized DAG back), imported lazily as the tests used them before.
"""

from __future__ import annotations

from typing import Any


def dag_bag(folder: str) -> Any:
    """A ``DagBag`` that parsed ``folder`` (in ``airflow.dag_processing`` from Airflow 3.2).

    :param folder: the DAG folder.
    """
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:
        from airflow.models.dagbag import DagBag
    return DagBag(dag_folder=folder)


def serialize_dag(dag: Any) -> dict[str, Any]:
    """``dag`` as the scheduler stores it (``DagSerialization`` from 3.2, ``SerializedDAG`` before).

    :param dag: a DAG of the Task SDK.
    """
    try:
        from airflow.serialization.serialized_objects import DagSerialization
    except ImportError:
        from airflow.serialization.serialized_objects import SerializedDAG as DagSerialization
    return DagSerialization.to_dict(dag)


def latest_serialized_dag(dag: Any, session: Any) -> Any:
    """``dag`` as the API server reads it: its newest serialized version in the metadata DB.

    Airflow 3.0's ``dag.test()`` writes no serialized DAG (3.1 does); there it is the same
    serialization round trip the DB row would hold (``SerializedDAG``, as ``dag.test()`` itself
    builds its scheduler-side DAG).

    :param dag: a DAG of the Task SDK that ``dag.test()`` ran.
    :param session: a metadata DB session.
    """
    try:
        from airflow.models.dagbag import DBDagBag
    except ImportError:  # Airflow 3.0
        from airflow.models.dagbag import DagBag
        from airflow.serialization.serialized_objects import SerializedDAG

        stored = DagBag(read_dags_from_db=True).get_dag(dag.dag_id, session=session)
        if stored is not None:
            return stored
        return SerializedDAG.deserialize_dag(SerializedDAG.serialize_dag(dag))
    return DBDagBag().get_latest_version_of_dag(dag.dag_id, session=session)


def param_validation_error() -> type[Exception]:
    """What a ``Param`` raises on an invalid value (``airflow.sdk.exceptions`` from 3.2)."""
    try:
        from airflow.sdk.exceptions import ParamValidationError
    except ImportError:
        from airflow.exceptions import ParamValidationError
    return ParamValidationError
