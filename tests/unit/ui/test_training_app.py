"""Every route of the Training app asks Airflow's auth manager (``ui/training_app``): a plugin's
FastAPI app is not protected by Airflow unless each route depends on its user."""

from __future__ import annotations

from types import SimpleNamespace

from airflow.api_fastapi.core_api.security import get_user
from airflow.models.taskinstancekey import TaskInstanceKey
from fastapi.routing import APIRoute

from airflow_volcano_wandb.airflow_compat import INSTALLED_AIRFLOW
from airflow_volcano_wandb.ui.plugin import TrainingPlugin
from airflow_volcano_wandb.ui.training_app import PREFIX, SHELL, _map_index, app
from airflow_volcano_wandb.ui.training_link import TrainingLink


def calls(dependant) -> set:
    found = {dependant.call}
    for sub in dependant.dependencies:
        found |= calls(sub)
    return found


def test_every_route_depends_on_the_signed_in_user():
    # Airflow 3.0 (no cookie a page's address sends): the pages' shells go to anyone, the API not
    routes = [route for route in app.routes if isinstance(route, APIRoute)]
    assert len(routes) == 6
    unguarded = [route.path for route in routes if get_user not in calls(route.dependant)]
    assert unguarded == ([] if SHELL else [r.path for r in routes if "/api/" not in r.path])


def test_a_task_instances_routes_check_read_access_to_its_dag():
    guarded = {
        route.path
        for route in app.routes
        if isinstance(route, APIRoute)
        and any(
            "requires_access_dag" in getattr(c, "__qualname__", "") for c in calls(route.dependant)
        )
    }
    shell = {"/ti/{dag_id}/{run_id}/{task_id}/{map_index}"} if SHELL else set()
    assert guarded == {"/api/ti/{dag_id}/{run_id}/{task_id}/{map_index}", *shell}


def test_the_plugin_puts_a_tab_on_the_task_instance_page_and_a_page_in_the_navigation():
    (served,) = TrainingPlugin.fastapi_apps
    assert served["app"] is app and served["url_prefix"] == PREFIX
    views = {view["destination"]: view["href"] for view in TrainingPlugin.external_views}
    assert views == {
        "task_instance": f"{PREFIX}/ti/{{DAG_ID}}/{{RUN_ID}}/{{TASK_ID}}/{{MAP_INDEX}}",
        "nav": f"{PREFIX}/",
    }


def test_an_unmapped_tasks_tab_reads_as_map_index_minus_one():
    # Airflow 3.3 leaves {MAP_INDEX} unfilled in the tab's address for a task that is not mapped
    assert [_map_index(text) for text in ("{MAP_INDEX}", "-1", "3", "")] == [-1, -1, 3, -1]


def test_on_airflow_3_0_a_training_link_opens_the_tabs_page_of_the_providers_tasks_only():
    links = TrainingPlugin.global_operator_extra_links
    assert [type(link) for link in links] == ([] if SHELL else [TrainingLink])
    assert bool(SHELL) is (INSTALLED_AIRFLOW.release >= (3, 1))
    key = TaskInstanceKey("train_dag", "wait", "manual__2027-01-15T07:00:00+00:00", 1, -1)
    link = TrainingLink()
    assert link.get_link(SimpleNamespace(task_type="VolcanoJobSensor"), ti_key=key) == (
        f"{PREFIX}/ti/train_dag/manual__2027-01-15T07%3A00%3A00%2B00%3A00/wait/-1"
    )
    assert link.get_link(SimpleNamespace(task_type="BashOperator"), ti_key=key) == ""


def test_a_request_without_a_user_reads_no_job_and_on_3_1_not_even_a_pages_shell():
    from fastapi.testclient import TestClient

    client = TestClient(app)
    shells = ("/", "/static/training.js", "/ti/dag/run/task/-1")
    assert {client.get(path).status_code for path in shells} == ({401} if SHELL else {200})
    assert {client.get(path).status_code for path in ("/api/jobs", "/api/ti/dag/run/task/-1")} == {
        401
    }
