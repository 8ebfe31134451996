"""What a Param or a Jinja expression gives reaches ``wandb.config`` and the template with its
type (#41 item 1): a whole ``{{ expression }}`` in a typed option is the value it evaluates
to, in a DAG of either kind, a mapped (sweep) task too, and in ``dry_run()``."""

from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace
from typing import Any

import jinja2
import pytest
from airflow.sdk import DAG, Param

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator, preview
from airflow_volcano_wandb.wandb import sweep
from test_support.template_cases import SEED

PARAMS = {
    "epochs": Param(3, type="integer"),
    "lr": Param(0.05, type="number"),
    "tag": Param("007", type="string"),  # a string that looks like a number stays a string
    "fast": Param(True, type="boolean"),
    "workers": Param(2, type="integer"),
}
RUN_CONFIG = {
    "epochs": "{{ params.epochs }}",
    "lr": "{{ params.lr }}",
    "tag": "{{ params.tag }}",
    "fast": "{{ params.fast }}",
    "label": "run-{{ params.epochs }}",  # text around it: text
    "doubled": "{{ params.epochs * 2 }}",
    "layers": ["{{ params.workers }}", 64],
}
TYPED = {
    "epochs": 3,
    "lr": 0.05,
    "tag": "007",
    "fast": True,
    "label": "run-3",
    "doubled": 6,
    "layers": [2, 64],
}


def _dag(native: bool = False) -> DAG:
    return DAG(
        "typed",
        schedule=None,
        start_date=dt.datetime(2026, 1, 1),
        params=PARAMS,
        render_template_as_native_obj=native,
        template_searchpath=[str(SEED.parent)],
    )


def _operator(native: bool = False, **kwargs: Any) -> VolcanoPyTorchJobOperator:
    with _dag(native):
        return VolcanoPyTorchJobOperator(
            task_id="train",
            template=SEED.name,
            image_uri="registry.example.com/team/ddp:1.0",
            namespace="wandb",
            replicas={"worker": "{{ params.workers }}"},
            **{"run_config": RUN_CONFIG, **kwargs},
        )


def _rendered(op: Any, **context: Any) -> Any:
    op.render_template_fields({"params": {k: p.value for k, p in PARAMS.items()}, **context})
    return op


@pytest.mark.parametrize("native", [False, True], ids=["text-dag", "native-dag"])
def test_a_whole_expression_keeps_the_type_its_param_had(native):
    op = _rendered(_operator(native, env={"EPOCHS": "{{ params.epochs }}"}))
    # The rendered fields are what the Rendered Template view shows.
    assert op.run_config == TYPED
    assert op.replicas == {"worker": 2}
    assert op.env == {"EPOCHS": 3 if native else "3"}  # not typed here: Airflow's own rendering


def test_a_value_that_is_not_json_renders_as_text_and_an_undefined_one_fails():
    op = _operator(run_config={"at": "{{ when }}"})
    when = dt.datetime(2026, 1, 2, 3, 4)
    assert _rendered(op, when=when).run_config == {"at": str(when)}
    with pytest.raises(jinja2.UndefinedError, match="missing"):
        _rendered(_operator(run_config={"x": "{{ params.missing }}"}))


def test_dry_run_hands_wandb_config_its_types(wandb_connection):
    job = preview.rendered_job(_operator())
    master, worker = job["spec"]["tasks"]
    env = {e["name"]: e.get("value") for e in master["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env["WANDB_CONFIG"]) == TYPED
    assert worker["replicas"] == 2


def test_a_sweeps_mapped_task_keeps_its_points_and_its_jinja_typed():
    points = sweep.points({"method": "grid", "parameters": {"lr": {"values": [0.01, 0.05]}}})
    with _dag() as dag:
        mapped = VolcanoPyTorchJobOperator.partial(
            task_id="train",
            template=SEED.name,
            namespace="wandb",
            replicas={"worker": "{{ params.workers }}"},
        ).expand_kwargs(sweep.expand_kwargs(points, to="run_config"))
    ti = SimpleNamespace(map_index=1, task=mapped)
    context = {"dag": dag, "dag_run": SimpleNamespace(conf={}), "ti": ti, "task": mapped}
    mapped.render_template_fields(context)
    assert (context["task"].run_config, context["task"].replicas) == ({"lr": 0.05}, {"worker": 2})
