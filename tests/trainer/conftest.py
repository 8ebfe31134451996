"""Fixtures of the trainer tests."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from test_support.trainer_runs import TRAIN_PY, _require_torch


@pytest.fixture
def torch_installed() -> None:
    """Fails (never skips) a test that runs the trainer where CPU torch is not installed."""
    _require_torch()


@pytest.fixture(scope="module")
def trainer() -> Iterator[SimpleNamespace]:
    """The trainer's modules imported in-process, by name (``trainer.checkpoints``). They are
    scripts that import each other from beside ``train.py`` (the image's ``/app``), not a
    package, so their folder is on the import path while a test module uses them."""
    _require_torch()
    folder = str(TRAIN_PY.parent)
    sys.path.insert(0, folder)
    try:
        yield SimpleNamespace(
            **{
                path.stem: importlib.import_module(path.stem)
                for path in TRAIN_PY.parent.glob("*.py")
            }
        )
    finally:
        sys.path.remove(folder)
