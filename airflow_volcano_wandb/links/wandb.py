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

    Airflow 3 serves extra links from the XCom named by :attr:`xcom_key`: the operator's own
    ``wandb_run_url``, pushed before it waits, not Airflow's default ``_link_WandbRunLink``, so
    a running task has the button too. A finishing task stores :meth:`get_link`'s result under
    the same key, so it returns what is there (``""``: no button) instead of rebuilding it.
    """

    name = "W&B Run"
    #: The XCom key holding the run URL, shared with the operator.
    xcom_key = WANDB_RUN_URL_XCOM_KEY

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """Return the run URL the task pushed to XCom, or ``""`` if there is none."""
        value: Any = XCom.get_value(ti_key=ti_key, key=self.xcom_key)
        return value if isinstance(value, str) else ""
