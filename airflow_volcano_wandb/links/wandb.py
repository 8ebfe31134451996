"""The "W&B Run" button of a training task in the Airflow UI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

__all__ = ["WANDB_RUN_URL_XCOM_KEY", "WandbRunLink"]

WANDB_RUN_URL_XCOM_KEY = "wandb_run_url"


class WandbRunLink(BaseOperatorLink):
    """Link a task to its W&B run, read from the XCom ``wandb_run_url``.

    Airflow 3 serves extra links from XCom: the API server reads the XCom named by
    :attr:`xcom_key`, so the button works as soon as the operator has pushed the URL, which it
    does before it waits for the job. That is why the key is the operator's own
    ``wandb_run_url`` and not Airflow's default ``_link_WandbRunLink``: a running task has the
    link too, not only a finished one.

    When a task finishes, the task runner calls :meth:`get_link` and stores the result under
    the same key, so :meth:`get_link` returns what is already there instead of rebuilding it
    (an empty string, meaning "no button", when the task failed before choosing a run).
    """

    name = "W&B Run"

    @property
    def xcom_key(self) -> str:
        """The XCom key holding the run URL, shared with the operator."""
        return WANDB_RUN_URL_XCOM_KEY

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """Return the run URL the task pushed to XCom, or ``""`` if there is none."""
        value: Any = XCom.get_value(ti_key=ti_key, key=self.xcom_key)
        return value if isinstance(value, str) else ""
