"""A run's and the app's URLs (wandb/wandb_urls.py), as the installed SDK builds them."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.wandb.wandb_run import (
    WandbRunSpec,
)
from airflow_volcano_wandb.wandb.wandb_urls import app_url, run_url
from test_support.wandb_specs import make_spec

# -- URLs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        (None, "https://wandb.ai/team/mlp/runs/abc123"),
        ("https://api.wandb.ai", "https://wandb.ai/team/mlp/runs/abc123"),
        ("https://api.wandb.ai/", "https://wandb.ai/team/mlp/runs/abc123"),
        ("https://wandb.example.com", "https://wandb.example.com/team/mlp/runs/abc123"),
        ("http://localhost:8080/", "http://localhost:8080/team/mlp/runs/abc123"),
        ("https://api.acme.example", "https://app.acme.example/team/mlp/runs/abc123"),
    ],
)
def test_run_url(base_url: str | None, expected: str) -> None:
    assert run_url(base_url, "team", "mlp", "abc123") == expected


def test_run_url_quotes_path_segments() -> None:
    assert (
        run_url(None, "team", "my project", "a#b")
        == "https://wandb.ai/team/my%20project/runs/a%23b"
    )


@pytest.mark.parametrize(
    "base_url",
    [
        # Not "https://api.wandb.ai": wandb>=0.26 links it to CoreWeave Forge's UI; we keep
        # https://wandb.ai, the cloud's long-standing address (test_run_url covers it).
        "https://api.forge.coreweave.com",
        "https://api.wandb.test",
        "https://api.acme.example",
        "https://wandb.example.com",
        "http://localhost:8080",
        "http://127.0.0.1:9999",
    ],
)
def test_app_url_matches_the_sdk(base_url: str) -> None:
    from wandb import util as wandb_util

    # The wandb of Airflow 3.0's time (0.21, in test-compat) calls it `app_url`.
    sdk_app_url = getattr(wandb_util, "api_to_app_url", None) or wandb_util.app_url
    if "forge.coreweave.com" in base_url:
        # Ours always links Forge's real UI. An SDK that does not know it yet (before 0.31)
        # sends Forge's API to the generic "app." host; one that knows it agrees with us.
        assert app_url(base_url) == "https://forge.coreweave.com/wandb"
        assert sdk_app_url(base_url).rstrip("/") in (
            "https://forge.coreweave.com/wandb",
            "https://app.forge.coreweave.com",
        )
        return
    assert app_url(base_url) == sdk_app_url(base_url).rstrip("/")


def test_spec_url() -> None:
    assert make_spec().url == f"https://wandb.ai/team/mlp/runs/{make_spec().run_id}"
    assert WandbRunSpec(run_id="abc").url is None
