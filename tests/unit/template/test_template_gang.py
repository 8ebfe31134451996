"""Gang consistency (template/gang.py): minAvailable follows the ranks, job- and task-level."""

from __future__ import annotations

import pytest
import yaml

from airflow_volcano_wandb.template import TemplateError
from test_support.template_cases import (
    FIXTURES,
    MACROS,
    render,
    render_job,
    seed,
    task,
)

# --- gang consistency ---------------------------------------------------------------------


def test_seed_min_available_is_kept_when_it_is_not_a_gang_of_all() -> None:
    job = render(replicas={"worker": 7}, gang="template")
    assert job["spec"]["minAvailable"] == 1


def test_a_pytorch_gang_is_every_rank_by_default() -> None:
    # The seed's minAvailable 1 would start the master alone, to hang in init_process_group.
    assert render(replicas={"worker": 7})["spec"]["minAvailable"] == 8
    assert render(replicas={"worker": 0})["spec"]["minAvailable"] == 1
    bigger = seed()
    bigger["spec"]["tasks"].append({**bigger["spec"]["tasks"][1], "name": "evaluator"})
    bigger["spec"]["minAvailable"] = 3  # a side task in the gang too: the author's choice
    assert render(bigger)["spec"]["minAvailable"] == 3
    with pytest.raises(TemplateError, match="gang"):
        render(gang="most")


def test_gang_of_all_follows_the_new_total() -> None:
    template = seed()
    template["spec"]["minAvailable"] = 2
    assert render(template, replicas={"worker": 7})["spec"]["minAvailable"] == 8
    assert render(template, replicas={"worker": 0})["spec"]["minAvailable"] == 1
    assert render(template)["spec"]["minAvailable"] == 2


def test_min_available_that_no_longer_fits_is_an_error() -> None:
    template = seed()
    template["spec"]["tasks"][1]["replicas"] = 4
    template["spec"]["minAvailable"] = 3  # chosen on purpose: kept, and must still fit
    assert render(template, replicas={"worker": 9}, gang="template")["spec"]["minAvailable"] == 3
    with pytest.raises(TemplateError, match=r"spec\.minAvailable: is 3 but the job now has 2"):
        render(template, replicas={"worker": 1})


def test_task_level_min_available() -> None:
    job = render_job(
        FIXTURES / "chief-replica-pytorch.yaml",
        macros={**MACROS, "epochs": 1, "lr": 0.1},
        replicas={"replica": 8},
    )
    assert task(job, "replica")["minAvailable"] == 8  # was 4 == replicas: a gang of all
    assert job["spec"]["minAvailable"] == 9
    template = yaml.safe_load((FIXTURES / "chief-replica-pytorch.yaml").read_text())
    template["spec"]["tasks"][1]["minAvailable"] = 3
    template["spec"]["minAvailable"] = 2
    macros = {**MACROS, "epochs": 1, "lr": 0.1}
    assert (
        task(render_job(template, macros=macros, replicas={"replica": 8}), "replica")[
            "minAvailable"
        ]
        == 3
    )
    with pytest.raises(
        TemplateError, match=r"spec\.tasks\[1\]\.minAvailable: is 3 but task 'replica' now has 2"
    ):
        render_job(template, macros=macros, replicas={"replica": 2})
