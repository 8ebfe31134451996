"""Elastic workers (issue 51): ``elastic=(min_workers, max_workers)`` renders a job Volcano
admits that gangs on the master and ``min_workers``, asks for ``max_workers``, replaces a lost
worker's pod alone, restarts the job when the master goes, and runs torchrun's elastic launch
with a c10d rendezvous on the master; bad input names its field and renders nothing."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_volcano_wandb.template import TemplateError, load_template, volcano
from airflow_volcano_wandb.template.elastic import ELASTIC_ANNOTATION
from test_support.template_cases import MACROS, SEED, render_job

#: Elastic needs the torchrun stage the shared helper turns off for the other stages' tests.
ON = {"torchrun_env": True}
NAME = "wandb-job-k3x9p2qa"
MASTER_ADDR = f"{NAME}-master-0.{NAME}"


def _env(task: dict[str, Any]) -> dict[str, Any]:
    container = task["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _policies(task: dict[str, Any]) -> dict[str, str]:
    """Event -> action of a task's policies, each event once, as Volcano's webhook insists."""
    mapped: dict[str, str] = {}
    for policy in task.get("policies", []):
        events = [*policy.get("events", []), *([policy["event"]] if "event" in policy else [])]
        for event in events:
            assert event not in mapped, f"duplicate event {event} across policies: {task}"
            assert event in volcano.POLICY_EVENTS and policy["action"] in volcano.POLICY_ACTIONS
            mapped[event] = policy["action"]
    return mapped


def _admitted_shape(job: dict[str, Any]) -> None:
    """The counting rules of Volcano's validating webhook (admit_job.go): every task's
    minAvailable within its replicas, the job's within the total."""
    tasks = job["spec"]["tasks"]
    assert all(0 <= t.get("minAvailable", t["replicas"]) <= t["replicas"] for t in tasks)
    assert 0 <= job["spec"]["minAvailable"] <= sum(t["replicas"] for t in tasks)


@pytest.mark.parametrize(("low", "high"), [(0, 1), (1, 1), (1, 3), (2, 4), (3, 8)])
def test_an_elastic_job_gangs_on_the_master_and_min_workers_and_asks_for_max(low, high) -> None:
    job = render_job(SEED, macros=MACROS, elastic=(low, high), **ON)
    master, worker = job["spec"]["tasks"]
    _admitted_shape(job)
    assert job["spec"]["minAvailable"] == 1 + low
    assert (master["minAvailable"], worker["minAvailable"]) == (1, low)
    assert (master["replicas"], worker["replicas"]) == (1, high)
    assert job["metadata"]["annotations"][ELASTIC_ANNOTATION] == f"{low}:{high}"
    assert job["spec"]["maxRetry"] == 100  # every replaced worker pod is a retry to Volcano
    # The lost worker's pod alone; the master's loss the whole job; the master still ends it.
    assert _policies(worker) == {"PodEvicted": "RestartPod", "PodFailed": "RestartPod"}
    assert _policies(master) == {
        "TaskCompleted": "CompleteJob",
        "PodEvicted": "RestartJob",
        "PodFailed": "RestartJob",
    }
    assert "RestartJob" not in _policies(worker).values()
    assert "RestartTask" not in {**_policies(worker), **_policies(master)}.values()
    for task in (master, worker):
        env = _env(task)
        assert env["PET_NNODES"] == f"{1 + low}:{1 + high}"
        assert env["PET_RDZV_BACKEND"] == "c10d"
        assert env["PET_RDZV_ENDPOINT"] == f"{MASTER_ADDR}:23456"
        assert env["PET_RDZV_ID"] == NAME
        assert env["PET_LOCAL_ADDR"] == f"$(AVW_POD_NAME).{NAME}"
        assert env["AVW_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert env["AVW_ELASTIC_WORKERS"] == f"{low}:{high}"
        assert "PET_NODE_RANK" not in env  # the rendezvous ranks the pods
        assert env["PET_RDZV_CONF"] == f"is_host={int(task is master)}"
    assert "hcclrank" not in job["spec"]["plugins"]


def test_a_job_without_elastic_keeps_its_whole_gang_and_fixed_world() -> None:
    job = render_job(SEED, macros=MACROS, replicas={"worker": 3}, **ON)
    master, worker = job["spec"]["tasks"]
    assert job["spec"]["minAvailable"] == 4
    assert "minAvailable" not in worker and "annotations" not in job["metadata"]
    assert "maxRetry" not in job["spec"]
    assert _policies(worker) == {} and _policies(master) == {"TaskCompleted": "CompleteJob"}
    env = _env(worker)
    assert env["PET_NNODES"] == "4" and "PET_RDZV_BACKEND" not in env
    assert "AVW_ELASTIC_WORKERS" not in env


def test_the_master_pods_address_sorts_first_so_rank_0_stays_on_it() -> None:
    """torchrun's c10d rendezvous ranks the nodes in the order of their addresses."""
    job = render_job(SEED, macros=MACROS, elastic=(1, 12), **ON)
    pods = [f"{NAME}-master-0"] + [f"{NAME}-worker-{i}" for i in range(12)]
    addresses = [
        _env(job["spec"]["tasks"][0])["PET_LOCAL_ADDR"].replace("$(AVW_POD_NAME)", p) for p in pods
    ]
    assert sorted(addresses)[0] == f"{NAME}-master-0.{NAME}"


def test_elastic_true_reads_the_range_the_queue_admins_variables_fill_and_bound() -> None:
    template = load_template(SEED)
    worker = template["spec"]["tasks"][1]
    worker["replicas"], worker["minAvailable"] = "{{max_workers}}", "{{min_workers}}"
    schemas = [
        {"name": "min_workers", "schema": {"type": "integer", "minimum": 1, "maximum": 4}},
        {"name": "max_workers", "schema": {"type": "integer", "minimum": 1, "maximum": 6}},
    ]
    given = {"template_variable_schemas": schemas, **ON}
    job = render_job(
        template,
        macros=MACROS,
        template_variables={"min_workers": 2, "max_workers": 5},
        elastic=True,
        **given,
    )
    assert job["spec"]["minAvailable"] == 3 and job["spec"]["tasks"][1]["replicas"] == 5
    # A range the run asks for is held to the admin's bounds, as any override is.
    with pytest.raises(TemplateError) as caught:
        render_job(
            template,
            macros=MACROS,
            template_variables={"min_workers": 2, "max_workers": 5},
            elastic=(1, 9),
            **given,
        )
    assert "the elastic override sets 9" in str(caught.value)
    assert "'max_workers' is 9, above its maximum 6" in str(caught.value)
    # The variable's own bound holds first.
    with pytest.raises(TemplateError, match="min_workers"):
        render_job(
            template,
            macros=MACROS,
            template_variables={"min_workers": 0, "max_workers": 5},
            elastic=True,
            **given,
        )


@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        ((3, 2), "elastic.min_workers", "is 3, above max_workers (2)"),
        ((-1, 2), "elastic.min_workers", "must be 0 or more"),
        ((0, 0), "elastic.max_workers", "must be 1 or more"),
        ((1.5, 2), "elastic.min_workers", "must be an integer, not 1.5"),
        ((1, "4"), "elastic.max_workers", "must be an integer, not '4'"),
        ((True, 2), "elastic.min_workers", "must be an integer, not True"),
        ("1:4", "elastic", "must be (min_workers, max_workers), True or None"),
        ((1, 2, 3), "elastic", "must be (min_workers, max_workers)"),
    ],
)
def test_elastic_values_that_make_no_sense_are_refused_naming_the_field(
    value, field, words
) -> None:
    with pytest.raises(TemplateError) as caught:
        render_job(SEED, macros=MACROS, elastic=value, **ON)
    assert caught.value.path == field and words in str(caught.value)


def _seed_with(change) -> dict[str, Any]:
    template = load_template(SEED)
    change(template)
    return template


def _gpus(task: dict[str, Any], count: int) -> None:
    task["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": count}}


def _rename(template: dict[str, Any]) -> None:
    template["spec"]["tasks"][1]["name"] = "trainer"
    template["spec"]["plugins"]["pytorch"] = ["--master=master", "--worker=trainer"]


@pytest.mark.parametrize(
    ("change", "kwargs", "field", "words"),
    [
        (_rename, {}, "elastic", "tasks named master and worker"),
        (
            lambda t: t["spec"]["plugins"].pop("pytorch"),
            {},
            "spec.plugins.pytorch",
            "elastic needs the pytorch plugin",
        ),
        (
            lambda t: t["spec"]["tasks"][0].update(replicas=2),
            {},
            "spec.tasks[0].replicas",
            "exactly one master replica",
        ),
        (
            lambda t: _gpus(t["spec"]["tasks"][1], 1),
            {"elastic": (0, 2)},
            "elastic.min_workers",
            "the master asks for no GPU while the workers do",
        ),
        (
            lambda t: t["spec"]["tasks"][1].update(
                policies=[{"event": "PodEvicted", "action": "RestartJob"}]
            ),
            {},
            "spec.tasks[1].policies[0]",
            "maps PodEvicted to 'RestartJob'; elastic needs RestartPod",
        ),
        (
            lambda t: t["spec"]["tasks"][0]["policies"].append(
                {"event": "PodFailed", "action": "RestartPod"}
            ),
            {},
            "spec.tasks[0].policies[1]",
            "maps PodFailed to 'RestartPod'; elastic needs RestartJob",
        ),
        (lambda t: None, {"volcano_version": "v1.10.0"}, "elastic", "needs Volcano v1.11.0"),
        (lambda t: None, {"torchrun_env": False}, "torchrun_env", "elastic needs it"),
        (
            lambda t: None,
            {"max_replicas": 2},
            "elastic.max_workers",
            "is 3, above max_replicas (2)",
        ),
        (
            lambda t: None,
            {"replicas": {"worker": 2}},
            "elastic.max_workers",
            "replicas gives the worker task 2",
        ),
    ],
)
def test_templates_and_options_elastic_cannot_shape_are_refused_naming_the_field(
    change, kwargs, field, words
) -> None:
    given = {**ON, "elastic": (1, 3), **kwargs}
    with pytest.raises(TemplateError) as caught:
        render_job(_seed_with(change), macros=MACROS, **given)
    assert caught.value.path == field and words in str(caught.value)


def test_min_workers_0_is_fine_when_the_master_trains_on_the_workers_gpus() -> None:
    def both(template: dict[str, Any]) -> None:
        for task in template["spec"]["tasks"]:
            _gpus(task, 2)

    job = render_job(_seed_with(both), macros=MACROS, elastic=(0, 3), **ON)
    assert job["spec"]["minAvailable"] == 1
    assert _env(job["spec"]["tasks"][1])["PET_NPROC_PER_NODE"] == "2"


def test_a_templates_own_max_retry_is_kept() -> None:
    def own(template: dict[str, Any]) -> None:
        template["spec"]["maxRetry"] = 5

    job = render_job(_seed_with(own), macros=MACROS, elastic=(1, 2), **ON)
    assert job["spec"]["maxRetry"] == 5


def test_a_templates_own_restart_pod_policy_for_the_worker_is_kept() -> None:
    def own(template: dict[str, Any]) -> None:
        template["spec"]["tasks"][1]["policies"] = [{"event": "PodFailed", "action": "RestartPod"}]

    job = render_job(_seed_with(own), macros=MACROS, elastic=(1, 2), **ON)
    assert _policies(job["spec"]["tasks"][1]) == {
        "PodFailed": "RestartPod",
        "PodEvicted": "RestartPod",
    }


@pytest.mark.parametrize("setting", [None, False, True, (0, 1), (1, 1), (2, 4)])
def test_every_switch_setting_renders_a_job_volcanos_admission_rules_accept(setting) -> None:
    """Each setting of the switch, off included: ``render_job`` ran the template validator
    (Volcano v1.14.1's CRD schema and webhook rules); the counting rules and the policies'
    events and actions are checked here once more, on the job as rendered."""
    job = render_job(SEED, macros=MACROS, elastic=setting, **ON)
    _admitted_shape(job)
    for task in job["spec"]["tasks"]:
        _policies(task)
    elastic = setting not in (None, False)
    assert (ELASTIC_ANNOTATION in job["metadata"].get("annotations", {})) is elastic
