"""Every Python snippet the docs show runs against the package as written, and every operator
it builds dry-runs.

A page's ```python blocks run in order in one namespace (a later block may use what an earlier
one defined, as a reader would type them), from the repository root; each imports what it uses,
though, so a block copied alone still runs. Running a block imports what it imports and builds
what it builds: a ``with DAG(...)`` block builds its operators. Every
``VolcanoPyTorchJobOperator`` a block builds (a name it assigned, or a task of a DAG it made),
mapped or not (then once per map index), must then dry-run as ``dry_run()`` does: its templated
fields rendered against the context of a manual trigger (the DAG's params' defaults, a run
named ``dry_run``), its queue template filled into the Volcano Job. So a field that reads a
param its DAG lacks fails here with Jinja's ``UndefinedError``, as it would in a run. A template
path is read as the DAG folder ``dags/`` would read it; a ``wandb-queue://`` template reads a
stand-in queue (:func:`_stand_in_queue`). A failing block is named by file and line.
"""

from __future__ import annotations

import ast
import json
import re
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "docker/README.md"]
OPEN = re.compile(r"^(\s*)```python\s*$")

#: The example manual queue template and its variables' schemas, as a W&B queue admin writes them.
MANUAL_QUEUE = ROOT / "dags" / "templates" / "volcano-pytorch-manual"


def snippets(page: Path) -> Iterator[tuple[int, str]]:
    """``(line, code)`` of each ```python block: the line of its first line of code."""
    return snippets_in(page.read_text())


def snippets_in(text: str) -> Iterator[tuple[int, str]]:
    """:func:`snippets` of a page's ``text``."""
    lines = text.splitlines()
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


def _volcano_operators(namespace: Mapping[str, Any], dags: list[Any]) -> Iterator[Any]:
    """Every operator the snippets left in ``namespace`` or built in ``dags``; a mapped one
    once per map index, unmapped as Airflow unmaps it to run it."""
    from airflow.sdk import DAG
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator

    tasks = [v for v in namespace.values() if not isinstance(v, DAG)]
    for dag in [*dags, *(v for v in namespace.values() if isinstance(v, DAG))]:
        tasks.extend(dag.task_dict.values())
    for task in {id(t): t for t in tasks}.values():
        if isinstance(task, VolcanoPyTorchJobOperator):
            yield task
        elif isinstance(task, MappedOperator) and task.operator_class is VolcanoPyTorchJobOperator:
            for kwargs in task.expand_input.value:
                yield task.unmap(kwargs)


def _stand_in_queue(ref: str) -> Any:
    """The queue ``ref`` names, made up: docs/launch-migration.md's, whose variables are
    ``workers`` and ``gpus`` (the example manual template's, renamed)."""
    from airflow_volcano_wandb.wandb.wandb_queue_ref import QueueTemplate

    names = {"worker_replicas": "workers", "gpus_per_worker": "gpus"}
    text = MANUAL_QUEUE.with_suffix(".yaml").read_text()
    for name, new in names.items():
        text = text.replace(f"{{{{{name}}}}}", f"{{{{{new}}}}}")
    schemas = json.loads(MANUAL_QUEUE.with_suffix(".variables.json").read_text())
    return QueueTemplate(
        template=yaml.safe_load(text),
        template_variable_schemas=[{**v, "name": names[v["name"]]} for v in schemas],
    )


def _dry_run(op: Any) -> dict[str, Any]:
    """The Volcano Job ``op`` would submit, as ``op.dry_run()`` renders it, a template path read
    from ``dags/`` (the operator's DAG's template folders; a DAG of its own if it has none)."""
    from airflow.sdk import DAG

    from airflow_volcano_wandb.operators import preview

    if not op.has_dag():
        op.dag = DAG(f"doc_snippet_{op.task_id}", schedule=None)
    searchpath = op.dag.template_searchpath or []
    searchpath = [searchpath] if isinstance(searchpath, str) else list(searchpath)
    op.dag.template_searchpath = [*searchpath, str(ROOT / "dags")]
    return preview.rendered_job(op)


def _imported(tree: ast.Module) -> set[str]:
    return {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


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


@pytest.fixture
def dry_runs(monkeypatch, wandb_connection):
    """What a dry run reads: the ``wandb`` connection, the stand-in queue, and the process's
    W&B mode unset again (``checkpoint_artifact`` needs an online run)."""
    from airflow_volcano_wandb.hooks.wandb import WandbHook

    monkeypatch.setattr(WandbHook, "get_queue", lambda self, ref: _stand_in_queue(ref))
    return lambda: monkeypatch.delenv("WANDB_MODE", raising=False)


@pytest.mark.parametrize("page", PAGES_WITH_SNIPPETS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_python_snippet_runs(page, monkeypatch, wandb_disabled, dry_runs):
    from airflow.sdk import DAG

    built: list[Any] = []  # every DAG a block enters, named or not
    enter = DAG.__enter__
    monkeypatch.setattr(DAG, "__enter__", lambda dag: (built.append(dag), enter(dag))[1])
    monkeypatch.chdir(ROOT)
    where = page.relative_to(ROOT).as_posix()
    namespace: dict[str, Any] = {"__name__": f"doc_snippet_{page.stem}"}
    operators: dict[int, tuple[int, Any]] = {}
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
        for op in _volcano_operators(namespace, built):  # a later block may rebind the name
            operators.setdefault(id(op), (line, op))
    dry_runs()
    for line, op in operators.values():
        try:
            _dry_run(op)
        except Exception as err:
            pytest.fail(f"{where}:{line}: operator {op.task_id!r} fails its dry run: {err}")


@pytest.mark.parametrize("page", PAGES_WITH_SNIPPETS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_snippet_imports_what_it_uses(page):
    earlier: set[str] = set()
    for line, code in snippets(page):
        tree = ast.parse(code)
        names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
        used = {n.id for n in names if isinstance(n.ctx, ast.Load)}
        bound = {n.id for n in names if isinstance(n.ctx, ast.Store)} | _imported(tree)
        missing = sorted((used & earlier) - bound)
        assert not missing, f"{page.name}:{line}: uses {missing}, imported only by an earlier block"
        earlier |= _imported(tree)


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


def _operator(**kwargs: Any) -> Any:
    from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator

    kwargs = {"template": "templates/volcano-pytorch-queue-template.yaml", **kwargs}
    return VolcanoPyTorchJobOperator(task_id="train", **kwargs)


def test_a_dry_run_renders_the_jinja_and_the_queue_template(dry_runs):
    from airflow.sdk import DAG, Param

    with DAG("d", schedule=None, params={"workers": Param(3, type="integer")}):
        op = _operator(image_uri="i:1", replicas={"worker": "{{ params.workers }}"})
    job = _dry_run(op)
    assert [t["replicas"] for t in job["spec"]["tasks"]] == [1, 3]
    assert job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"] == "i:1"
    queue = {"template": "wandb-queue://e/q", "allowed_namespaces": ["wandb"]}
    op = _operator(**queue, image_uri="i:1", template_variables={"workers": 4})
    assert _dry_run(op)["spec"]["tasks"][1]["replicas"] == 4  # the stand-in queue's {{workers}}


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        # docs/sweeps.md's mapped snippet once read a param its DAG did not declare.
        ({"image_uri": "i:1", "wandb_sweep_id": "{{ params.wandb_sweep_id }}"}, "wandb_sweep_id"),
        # ... and once left the seed's ${image_uri} unfilled.
        ({}, "image_uri"),
    ],
    ids=["undeclared-param", "no-image"],
)
def test_what_a_run_would_refuse_fails_the_dry_run(dry_runs, kwargs, names):
    with pytest.raises(Exception, match=names):
        _dry_run(_operator(**kwargs))


def test_the_readmes_worked_example_imports_as_copied_into_a_fresh_dag_folder(
    tmp_path, monkeypatch, dry_runs
):
    """As the README says to copy it: the block as ``train.py``, the queue's template beside it
    at the path the README names; no ``dags/`` on the search path. The DAG folder's import
    finds no error, and the job renders from the template beside the file, into ``wandb``."""
    from airflow_volcano_wandb.operators import preview
    from test_support.airflow_compat import dag_bag

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Worked example") :]
    _, code = next(snippets_in(section))
    (path,) = re.findall(r"`(templates/[\w.-]+\.yaml)`", section.split("```")[2])
    assert f'template="{path}"' in code, "the README names another template path than it uses"
    folder = tmp_path / "dags"
    (folder / "templates").mkdir(parents=True)
    (folder / "train.py").write_text(code)
    (folder / path).write_text((ROOT / "dags" / path).read_text())
    monkeypatch.chdir(tmp_path)  # nothing of the repository's folders by a relative path
    bag = dag_bag(str(folder))
    assert bag.import_errors == {}, bag.import_errors
    dry_runs()
    job = preview.rendered_job(bag.dags["train"].get_task("train"))
    assert job["metadata"]["namespace"] == "wandb"
    assert {t["name"]: t["replicas"] for t in job["spec"]["tasks"]}["worker"] == 2
