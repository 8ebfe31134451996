"""Fixtures of the wait/ tests."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.wait import job_watcher, namespace_watch


@pytest.fixture
def fast(monkeypatch):
    """Backoffs of milliseconds, so a test takes no time; a watch is never 'stable' unless a
    test says so."""
    monkeypatch.setattr(namespace_watch, "RECONNECT_BACKOFF_INITIAL", 0.001)
    monkeypatch.setattr(namespace_watch, "RECONNECT_BACKOFF_MAX", 0.5)
    monkeypatch.setattr(namespace_watch, "STABLE_WATCH_SECONDS", 3600.0)
    monkeypatch.setattr(job_watcher, "FETCH_BACKOFF_INITIAL", 0.001)
