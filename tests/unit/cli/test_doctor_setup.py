"""The doctor's Airflow-side checks: the jobs' namespace, the components that need the
provider, and whether W&B accepts the key (asked of the W&B stand-in, within a bound)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import yaml

from airflow_volcano_wandb.cli import doctor, setup_checks
from airflow_volcano_wandb.cli.doctor_reads import ask_wandb
from airflow_volcano_wandb.cli.report import FAIL, OK, WARN
from test_support.wandb_standin import WandbStandin

ROOT = Path(__file__).resolve().parents[3]
KEY = "k" * 40


def test_the_seed_namespace_is_the_seeds_and_the_manifests():
    seed = yaml.safe_load((ROOT / "dags/templates/volcano-pytorch-queue-template.yaml").read_text())
    namespace = yaml.safe_load((ROOT / "docker/k8s/namespace.yaml").read_text())
    assert seed["metadata"]["namespace"] == setup_checks.SEED_NAMESPACE
    assert namespace["metadata"]["name"] == setup_checks.SEED_NAMESPACE


@pytest.mark.parametrize(
    ("explicit", "template", "connection", "expected"),
    [
        ("ns", {"metadata": {"namespace": "t"}}, "c", ("ns", "--namespace")),
        (None, None, "c", ("wandb", "the seed template's")),
        (None, {"metadata": {"namespace": "t"}}, "c", ("t", "the template's")),
        (None, {"metadata": {}}, "c", ("c", "the connection's")),
        (None, {"metadata": {}}, None, ("default", "no template or connection namespace")),
    ],
)
def test_the_jobs_namespace_is_found_as_the_operator_finds_it(
    explicit, template, connection, expected
):
    assert setup_checks.jobs_namespace(explicit, template, connection) == expected


@pytest.mark.parametrize("deferrable", [True, False])
def test_the_components_that_need_the_provider_are_named(deferrable):
    result = setup_checks.check_components(deferrable)
    assert result.status == OK
    for component in ("scheduler", "workers", "triggerer", "DAG processor", "API server"):
        assert component in result.detail
    needed = "a triggerer is needed: [operators] default_deferrable is True"
    assert (needed in result.detail) is deferrable
    assert ("only for tasks with deferrable=True" in result.detail) is not deferrable


@pytest.fixture(scope="module")
def standin():
    with WandbStandin(api_key=KEY) as server:
        yield server


def test_a_key_wandb_accepts_on_the_standin(standin):
    works, said = ask_wandb(standin.url, KEY, timeout=10)
    assert works is True and standin.viewer_entity in said
    assert standin.requests[-1].basic_auth_password == KEY  # asked with the key
    result = doctor.check_wandb("wandb_default", True, True, False, (works, said))
    assert result.status == OK and "W&B accepts it" in result.line()


def test_a_key_wandb_refuses_fails_and_is_never_printed_on_the_standin(standin):
    wrong = "w" * 40
    works, said = ask_wandb(standin.url, wrong, timeout=10)
    assert works is False and "401" in said
    line = doctor.check_wandb("wandb_default", True, True, False, (works, said)).line()
    assert line.startswith("FAIL") and "W&B refuses it" in line
    assert wrong not in line and wrong not in said


def test_a_silent_wandb_is_a_warning_within_the_bound():
    # A server that takes the connection and never answers (a black-holed egress).
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        start = time.monotonic()
        works, said = ask_wandb(f"http://127.0.0.1:{listener.getsockname()[1]}", KEY, timeout=1)
    assert time.monotonic() - start < 5
    assert works is None
    result = doctor.check_wandb("wandb_default", True, True, False, (works, said))
    assert result.status == WARN and "could not be asked" in result.detail


def test_an_unreachable_wandb_is_a_warning_and_the_message_never_holds_the_key():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    works, said = ask_wandb(f"http://{KEY}.invalid:{port}", KEY, timeout=5)
    assert works is None and KEY not in said and "***" in said


def test_offline_asks_nothing_and_needs_no_key():
    result = doctor.check_wandb("wandb_default", True, True, True, None)
    assert result.status == OK and "unused: WANDB_MODE is offline" in result.detail
    assert doctor.check_wandb("wandb_default", False, False, True).status == OK


def test_the_report_opens_with_the_components():
    from tests.unit.cli.test_doctor import SERVED  # a cluster where everything is served

    observed = _observed(SERVED)
    results = doctor.evaluate(observed, "default", "wandb_default", offline=False)
    assert results[0].name == "Airflow components"
    assert results[-1].status == FAIL  # W&B refused the key


# A cluster that answers everything but Volcano's webhooks, and W&B refusing the key.
FIRST_RUN = {
    "namespace": "wandb",
    "mutating": None,
    "validating": None,
    "queue": None,
    "queue_readable": False,
    "namespace_exists": None,
    "allowed": {},
    "wandb_exists": True,
    "wandb_has_key": True,
    "volcano_target": "1.14.1",
    "volcano_namespace": "volcano-system",
    "volcano_deployments": None,
    "wandb_answer": (False, "https://api.wandb.ai answered HTTP 401"),
}


def _observed(served):
    from airflow_volcano_wandb.cli.doctor_reads import Observed

    return Observed(served=served, **FIRST_RUN)
