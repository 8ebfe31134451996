"""The Training tab's and page's FastAPI app, served by Airflow's API server under
``/avw-training`` (``plugin.py``). Every route asks Airflow's auth manager first: a task
instance's routes need read access to its DAG's task instances (``requires_access_dag``), the
list shows only the DAGs the user may read (``get_authorized_dag_ids``), and the page's own
files need a signed-in user. What a route answers is :mod:`training_view`'s model: never a
Secret, a connection or the W&B key.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, get_user, requires_access_dag
from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
from airflow.models.taskinstance import TaskInstance as TI
from airflow.models.xcom import XComModel
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, Response
from packaging.version import Version
from sqlalchemy import select

from airflow_volcano_wandb.airflow_compat import INSTALLED_AIRFLOW
from airflow_volcano_wandb.job.job_view import JobView
from airflow_volcano_wandb.job.ownership import WANDB_RUN_LABEL
from airflow_volcano_wandb.ui import training_reads as reads
from airflow_volcano_wandb.ui.training_view import (
    MAX_POINTS,
    WAITING_STATES,
    Kept,
    Series,
    history_reports,
    list_row,
    log_reports,
    progress_of,
    task_view,
    web_link,
)
from airflow_volcano_wandb.wait.training_progress import METRICS_XCOM

PREFIX = "/avw-training"
STATIC = Path(__file__).parent / "static"
#: The task instances the Training page lists: this provider's operator and sensor.
OPERATORS = ("VolcanoPyTorchJobOperator", "VolcanoJobSensor")
#: The XComs the tab reads (what the operator pushes; never the rendered job).
KEYS = (
    "volcano_job",
    "wandb_run_id",
    "wandb_run_url",
    "gpu_seconds",
    "wandb_summary",
    METRICS_XCOM,
)
#: The rendered fields the tab reads: where the job runs and which connections read it.
FIELDS = (
    "job_name",
    "wandb_run_id",
    "namespace",
    "kubernetes_conn_id",
    "wandb_conn_id",
    "wandb_entity",
    "wandb_project",
)
#: The Training page waits this long at most for the W&B runs' summaries (their bars).
PAGE_WANDB_SECONDS = 5.0
#: A task instance: its DAG, run, task and map index.
TaskKey = tuple[str, str, str, int]

app = FastAPI(title="Volcano + W&B training", openapi_url=None, docs_url=None, redoc_url=None)
ReadTask = Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))
#: The pages' shells (no data) need a signed-in user, but on Airflow 3.0: its UI keeps the
#: user's token in the browser's storage, which opening a page does not send (3.1 and later
#: read the UI's cookie), so there they are served to anyone, and their script sends the
#: stored token with each read of ``/api/...``, which always asks the auth manager.
SHELL = [Depends(get_user)] if Version("3.1") <= INSTALLED_AIRFLOW else []


@functools.cache
def _page(name: str) -> str:
    """A static file of the package, read once per API server process (every refresh of a
    tab asks for the script and the stylesheet again)."""
    return (STATIC / name).read_text()


@app.get("/", response_class=HTMLResponse, dependencies=SHELL)
def training_page() -> str:
    """The Training page (its rows come from ``/api/jobs``)."""
    return _page("jobs.html")


@app.get("/static/training.js", dependencies=SHELL)
def script() -> Response:
    return Response(_page("training.js"), media_type="text/javascript")


@app.get("/static/training.css", dependencies=SHELL)
def style() -> Response:
    return Response(_page("training.css"), media_type="text/css")


@app.get(
    "/ti/{dag_id}/{run_id}/{task_id}/{map_index}",
    response_class=HTMLResponse,
    dependencies=[ReadTask] if SHELL else [],
)
def training_tab(dag_id: str, run_id: str, task_id: str, map_index: str) -> str:
    """The Training tab of one task instance (its model comes from ``/api/ti/...``)."""
    return _page("task.html")


@app.get("/api/ti/{dag_id}/{run_id}/{task_id}/{map_index}", dependencies=[ReadTask])
def task_model(dag_id: str, run_id: str, task_id: str, map_index: str, session: SessionDep) -> dict:
    """The tab's model: one GET of the job and one LIST of its pods while it is there; the
    chart from the W&B run's history, else from the master's ``AVW_PROGRESS`` records."""
    key = (dag_id, run_id, task_id, _map_index(map_index))
    state = session.scalar(select(TI.state).where(*_ti_is(*key)))
    if state is None and not _ti_exists(session, *key):
        raise HTTPException(404, "no such task instance")
    fields = _rendered(session, [key]).get(key, {})
    kept = _kept(_xcoms(session, [key]).get(key, {}), fields, state)
    job: dict | None = None
    pods: list[dict] = []
    reports: list = []
    if kept.job.get("name"):
        conn = fields.get("kubernetes_conn_id") or "kubernetes_default"
        job, pods = reads.job_and_pods(conn, kept.job["name"], kept.job.get("namespace", "default"))
        kept = _with_run(kept, fields, job)
        if kept.run_id:
            reports = history_reports(*reads.run_history(*_wandb(fields, kept.run_id), MAX_POINTS))
        if not reports and pods:
            reports = log_reports(reads.master_log(conn, job, pods))
    return task_view(kept, job, pods, Series.of(reports), time.time(), _task_url(*key))


@app.get("/api/jobs")
def jobs_model(
    user: GetUserDep, session: SessionDep, dag_id: Annotated[str | None, Query()] = None
) -> dict:
    """The Training page's rows: the waiting task instances of the DAGs the user may read, each
    with its job from one LIST of the managed jobs per namespace and its W&B run's summary."""
    from airflow.api_fastapi.app import get_auth_manager

    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
    if dag_id is not None:
        readable = readable & {dag_id}
    query = select(TI.dag_id, TI.run_id, TI.task_id, TI.map_index, TI.state).where(
        TI.dag_id.in_(readable), TI.operator.in_(OPERATORS), TI.state.in_(WAITING_STATES)
    )
    rows_read = session.execute(query.order_by(TI.dag_id, TI.task_id))
    tis: dict[TaskKey, Any] = {(r[0], r[1], r[2], r[3]): r[4] for r in rows_read}
    xcoms, fields = _xcoms(session, list(tis)), _rendered(session, list(tis))
    kept = {k: _kept(xcoms.get(k, {}), fields.get(k, {}), state) for k, state in tis.items()}
    listed: dict[str, dict[str, dict]] = {}
    for namespace in sorted({k.job.get("namespace", "") for k in kept.values()} - {""}):
        listed[namespace] = reads.managed_jobs("kubernetes_default", namespace)
    jobs = {
        k: listed.get(v.job.get("namespace", ""), {}).get(v.job.get("name", ""))
        for k, v in kept.items()
    }
    kept = {k: _with_run(v, fields.get(k, {}), jobs[k]) for k, v in kept.items()}
    runs = {k: v for k, v in kept.items() if v.run_id}
    pool = ThreadPoolExecutor(8)  # the runs' summaries read at once, for at most 5 s
    futures = {
        k: pool.submit(reads.run_summary, *_wandb(fields.get(k, {}), v.run_id or ""))
        for k, v in runs.items()
    }
    done, _ = wait(futures.values(), timeout=PAGE_WANDB_SECONDS)
    pool.shutdown(wait=False, cancel_futures=True)
    summaries = {k: f.result() for k, f in futures.items() if f in done}
    rows = [list_row(*key, kept[key], jobs[key], progress_of(summaries.get(key))) for key in kept]
    return {"jobs": rows, "dag_ids": sorted(readable)}


def _map_index(text: str) -> int:
    """The map index in a tab's URL; Airflow 3.3 leaves ``{MAP_INDEX}`` unfilled for a task
    that is not mapped, which reads as -1."""
    return int(text) if text.lstrip("-").isdigit() else -1


def _ti_is(dag_id: str, run_id: str, task_id: str, map_index: int) -> list:
    return [
        TI.dag_id == dag_id,
        TI.run_id == run_id,
        TI.task_id == task_id,
        TI.map_index == map_index,
    ]


def _ti_exists(session: Any, *key: Any) -> bool:
    return session.scalar(select(TI.task_id).where(*_ti_is(*key))) is not None


def _rows(session: Any, model: Any, keys: Iterable[TaskKey], *where: Any) -> Iterator[tuple]:
    """``(task instance, row)`` of each row of ``model`` (``where`` it holds) of these task
    instances."""
    wanted = set(keys)
    if not wanted:
        return
    query = select(model).where(
        *where, model.dag_id.in_({k[0] for k in wanted}), model.run_id.in_({k[1] for k in wanted})
    )
    for row in session.scalars(query):
        key = (row.dag_id, row.run_id, row.task_id, row.map_index)
        if key in wanted:
            yield key, row


def _xcoms(session: Any, keys: Iterable[TaskKey]) -> dict[TaskKey, dict[str, Any]]:
    """The tab's XComs of these task instances, by task instance and key."""
    found: dict[TaskKey, dict[str, Any]] = {}
    for key, row in _rows(session, XComModel, keys, XComModel.key.in_(KEYS)):
        found.setdefault(key, {})[row.key] = _value(row.value)
    return found


def _value(stored: Any) -> Any:
    """An XCom's value as stored by the default backend (JSON, maybe as a string)."""
    if isinstance(stored, str | bytes):
        try:
            return json.loads(stored)
        except ValueError:
            return stored
    return stored


def _rendered(session: Any, keys: Iterable[TaskKey]) -> dict[TaskKey, dict[str, str]]:
    """The rendered fields the tab needs (:data:`FIELDS`) of these task instances, as strings;
    nothing else of them."""
    found: dict[TaskKey, dict[str, str]] = {}
    for key, row in _rows(session, Rendered, keys):
        fields = row.rendered_fields if isinstance(row.rendered_fields, dict) else {}
        found[key] = {
            name: fields[name]
            for name in FIELDS
            if isinstance(fields.get(name), str) and fields[name]
        }
    return found


def _wandb(fields: dict[str, str], run: str) -> tuple[str, str, str | None, str | None]:
    """The W&B connection, run, entity and project a task's rendered fields name."""
    conn = fields.get("wandb_conn_id") or "wandb_default"
    return conn, run, fields.get("wandb_entity"), fields.get("wandb_project")


def _with_run(kept: Kept, fields: dict[str, str], job: dict | None) -> Kept:
    """``kept`` with its W&B run (its XCom, the sensor's rendered field, else the job's label)
    and the run's address (the operator's XCom, else told by the W&B connection)."""
    run = kept.run_id or (JobView.of(job).labels.get(WANDB_RUN_LABEL) if job else None)
    if not run:
        return kept
    url = kept.run_url or web_link(reads.run_url(*_wandb(fields, run)))
    return replace(kept, run_id=run, run_url=url)


def _kept(xcoms: dict[str, Any], fields: dict[str, str], state: Any) -> Kept:
    """What was kept; a sensor pushes no ``volcano_job``: its job is its rendered fields'."""
    if "volcano_job" not in xcoms and fields.get("job_name"):
        job = {"name": fields["job_name"], "namespace": fields.get("namespace") or "default"}
        xcoms = {**xcoms, "volcano_job": job}
    if "wandb_run_id" not in xcoms and fields.get("wandb_run_id"):
        xcoms = {**xcoms, "wandb_run_id": fields["wandb_run_id"]}
    return Kept.of_xcoms(xcoms, None if state is None else str(state))


def _task_url(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    dag, run, task = (quote(part, safe="") for part in (dag_id, run_id, task_id))
    url = f"/dags/{dag}/runs/{run}/tasks/{task}"
    return url + (f"/mapped/{map_index}" if map_index >= 0 else "")
