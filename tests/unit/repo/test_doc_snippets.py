"""Every Python snippet the docs show runs against the package as written.

A page's ```python blocks run in order in one namespace (a later block may use what an earlier
one defined, as a reader would type them), from the repository root. Running a block imports
what it imports and builds what it builds: a ``with DAG(...)`` block builds its operators.
Every ``VolcanoPyTorchJobOperator`` a page leaves behind (a name it assigned, or a task of a
DAG it assigned), mapped or not, must then name a template that renders with what the operator
would fill in: W&B's run macros and its ``image_uri`` (a template path is read as the DAG
folder ``dags/`` would read it). A failing block is named by file and line.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "docker/README.md"]
OPEN = re.compile(r"^(\s*)```python\s*$")

#: The run macros the operator fills from the W&B run (``wandb_env.macro_values``).
RUN_MACROS = {
    "run_id": "docsnippet0000001",
    "run_name": "doc-snippet",
    "entity_name": "docs",
    "project_name": "snippets",
    "author": "airflow",
}


def snippets(page: Path) -> Iterator[tuple[int, str]]:
    """``(line, code)`` of each ```python block: the line of its first line of code."""
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        if m := OPEN.match(lines[i]):
            indent, start, body = len(m.group(1)), i + 2, []
            i += 1
            while not lines[i].strip().startswith("```"):
                body.append(lines[i][indent:])
                i += 1
            yield start, "\n".join(body) + "\n"
        i += 1


PAGES_WITH_SNIPPETS = [p for p in PAGES if any(snippets(p))]


def _volcano_operators(namespace: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(name, kwargs)`` of every operator the snippets left behind; a mapped one's kwargs
    once per map index."""
    from airflow.sdk import DAG
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator

    tasks = [v for v in namespace.values() if not isinstance(v, DAG)]
    for dag in (v for v in namespace.values() if isinstance(v, DAG)):
        tasks.extend(dag.task_dict.values())
    for task in {id(t): t for t in tasks}.values():
        if isinstance(task, VolcanoPyTorchJobOperator):
            yield (
                task.task_id,
                {"template": task.template, "image_uri": task.image_uri, "macros": task.macros},
            )
        elif isinstance(task, MappedOperator) and task.operator_class is VolcanoPyTorchJobOperator:
            for kwargs in task.expand_input.value:
                yield task.task_id, {**task.partial_kwargs, **kwargs}


def _renders(kwargs: Mapping[str, Any]) -> None:
    from airflow_volcano_wandb.template import render_job

    template = kwargs["template"]
    if isinstance(template, str) and not template.startswith("wandb-queue://"):
        template = str(ROOT / "dags" / template)
    macros = {**RUN_MACROS, **(kwargs.get("macros") or {})}
    if kwargs.get("image_uri") is not None:
        macros["image_uri"] = kwargs["image_uri"]
    # A template from the DAG folder is its author's, as the operator treats it.
    render_job(template, macros=macros, template_namespace_allowed=True)


def _says_which_airflow_it_needs(page: Path, line: int, err: ImportError) -> bool:
    """A snippet that uses what only a newer Airflow has (Airflow 3.3's retry policies) may
    fail to import on an older one (the compat run) only where the page says so beside it."""
    from airflow import __version__

    newer = err.name is None or err.name.startswith("airflow")
    if not newer or not __version__.startswith(("3.0.", "3.1.", "3.2.")):
        return False
    nearby = page.read_text().splitlines()[max(0, line - 15) : line + 40]
    return any("Airflow 3.3" in text for text in nearby)


@pytest.fixture
def wandb_disabled(monkeypatch):
    """A trainer-side snippet calls wandb.init(): no W&B server is asked. wandb reads its env
    once, into a process-wide singleton that an earlier test's W&B client may have made online,
    so the singleton is dropped before the env is read and again after."""
    import wandb

    wandb.teardown()
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    wandb.teardown()


@pytest.mark.parametrize("page", PAGES_WITH_SNIPPETS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_python_snippet_runs(page, monkeypatch, wandb_disabled):
    monkeypatch.chdir(ROOT)
    where = page.relative_to(ROOT).as_posix()
    namespace: dict[str, Any] = {"__name__": f"doc_snippet_{page.stem}"}
    for line, code in snippets(page):
        try:
            exec(compile("\n" * (line - 1) + code, f"{where}", "exec"), namespace)
        except ImportError as err:
            if not _says_which_airflow_it_needs(page, line, err):
                pytest.fail(
                    f"{where}:{line}: the snippet fails:\n{traceback.format_exc(limit=-3)}",
                    pytrace=False,
                )
        except BaseException:  # any failure of the snippet, SyntaxError included
            pytest.fail(
                f"{where}:{line}: the snippet fails:\n{traceback.format_exc(limit=-3)}",
                pytrace=False,
            )
    for task_id, kwargs in _volcano_operators(namespace):
        try:
            _renders(kwargs)
        except Exception as err:
            pytest.fail(f"{where}: operator {task_id!r} cannot render its job: {err}")


def test_a_failing_snippet_is_named_by_file_and_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\ntext\n\n```python\nx = 1\n```\n\n- item\n\n  ```python\n  y = x + 1\n  ```\n"
    )
    assert list(snippets(page)) == [(6, "x = 1\n"), (12, "y = x + 1\n")]
    # The line a traceback names is the doc's line.
    code = "\n" * 11 + "raise ValueError('boom')\n"
    try:
        exec(compile(code, "page.md", "exec"), {})
    except ValueError:
        assert 'File "page.md", line 12' in traceback.format_exc()


def test_an_operator_without_its_image_cannot_render():
    # The seed's ${image_uri} is then never filled (docs/sweeps.md's mapped snippet once).
    from airflow_volcano_wandb.template import TemplateError

    with pytest.raises(TemplateError, match="image_uri"):
        _renders({"template": "templates/volcano-pytorch-queue-template.yaml"})
    _renders({"template": "templates/volcano-pytorch-queue-template.yaml", "image_uri": "i:1"})
