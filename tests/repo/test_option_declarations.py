"""Every option is declared in at most two places, read from the source (issue 52 goal 4).

A declaration is a part's field made by ``option(...)`` (its default and doc; a ``render=``
field declares the ``render_job`` keyword it renames) or an entry of the provider's
``[volcano_wandb]`` configuration (``get_provider_info``'s ``config``). A shell takes
``render_job``'s other keywords as they are (``passed_on``), so they are declared once, in
``template/``; the second place is a rename, another shell's own, or the deployment's setting.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_volcano_wandb"
MOST_PLACES = 2


def _is_option_call(node: ast.expr | None) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name in ("option", "rendered")


def _declared_name(field: str, call: ast.Call) -> str:
    """The option a field declares: the keyword it renames, if it names one, else its own."""
    for keyword in call.keywords:
        value = keyword.value
        if (
            keyword.arg == "render"
            and isinstance(value, ast.Constant)
            and isinstance(value.value, str)
        ):
            return value.value
    return field


@functools.cache  # the package is parsed once for the three tests
def _parsed() -> dict[str, set[str]]:
    places: dict[str, set[str]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for cls in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(cls, ast.ClassDef):
                continue
            for stmt in cls.body:
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and _is_option_call(stmt.value)
                ):
                    assert isinstance(stmt.value, ast.Call)
                    name = _declared_name(stmt.target.id, stmt.value)
                    places[name].add(f"{module}:{cls.name}.{stmt.target.id}")
    return places


def _field_declarations() -> dict[str, set[str]]:
    return {name: set(places) for name, places in _parsed().items()}


def _config_declarations() -> set[str]:
    """The ``[volcano_wandb]`` options: the keys of the dict literal whose entries each have a
    ``description`` and a ``default``."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Dict)
            and node.keys
            and all(
                isinstance(v, ast.Dict)
                and {"description", "default"}
                <= {k.value for k in v.keys if isinstance(k, ast.Constant)}
                for v in node.values
            )
        ):
            return {k.value for k in node.keys if isinstance(k, ast.Constant)}
    raise AssertionError("airflow_volcano_wandb/__init__.py declares no [volcano_wandb] options")


def _declarations() -> dict[str, set[str]]:
    places = _field_declarations()
    for name in _config_declarations():
        places.setdefault(name, set()).add(f"[volcano_wandb] {name}")
    return places


def test_the_guard_reads_the_declarations():
    """The source reading finds what it must, so the rule below has something to hold."""
    places = _declarations()
    assert len(places) > 60
    assert "template/shaping.py:Shaping.volcano_version" in places["volcano_version"]
    assert "[volcano_wandb] volcano_version" in places["volcano_version"]
    assert "parts/job_request.py:JobRequest.job_name" in places["name"]  # a rename


def test_no_option_is_declared_in_more_than_two_places():
    crowded = {name: sorted(p) for name, p in _declarations().items() if len(p) > MOST_PLACES}
    assert not crowded, (
        f"options declared in more than {MOST_PLACES} places (a shell takes a render_job "
        f"keyword as it is with passed_on, not a declaration of its own): {crowded}"
    )


def test_the_operators_job_request_declares_no_render_job_keyword_but_its_renames():
    """``parts/job_request.py`` names only what it renames: any other ``render_job`` keyword
    it offers is ``passed_on``, declared once in ``template/``."""
    places = _field_declarations()
    in_template = {n for n, p in places.items() if any(s.startswith("template/") for s in p)}
    source = (PACKAGE / "parts" / "job_request.py").read_text()
    own = [
        (stmt.target.id, _declared_name(stmt.target.id, stmt.value))
        for cls in ast.walk(ast.parse(source))
        if isinstance(cls, ast.ClassDef) and cls.name == "JobRequest"
        for stmt in cls.body
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and isinstance(stmt.value, ast.Call)
        and _is_option_call(stmt.value)
    ]
    assert own, "parts/job_request.py declares no option: is JobRequest still there?"
    restated = [field for field, name in own if name in in_template and field == name]
    assert not restated, f"JobRequest declares render_job's keywords again: {restated}"
