"""Loading a queue template from a file, a YAML/JSON string, a dict or a W&B queue config."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

import yaml

from airflow_volcano_wandb.template.errors import TemplateError
from airflow_volcano_wandb.template.values import copy_json, show, type_name

API_VERSION = "batch.volcano.sh/v1alpha1"
KIND = "Job"
TEMPLATE_SUFFIXES = (".yaml", ".yml", ".json")

if TYPE_CHECKING:  # the C loader, where built, has the pure-Python one's interface
    _BaseLoader = yaml.SafeLoader
else:
    _BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _TemplateLoader(_BaseLoader):
    """Safe YAML loading with two changes that matter for manifests.

    Timestamps stay strings: PyYAML would turn ``2025-01-01`` into a ``date``, which is not
    JSON and is never what an annotation meant. Duplicate keys are errors: PyYAML silently
    keeps the last one, hiding a typo'd override of e.g. ``replicas``.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable key: construct_mapping reports it below
                continue
            if duplicate:
                mark = key_node.start_mark
                raise TemplateError(
                    f"duplicate key {show(key)} at line {mark.line + 1}, column {mark.column + 1}"
                )
        return super().construct_mapping(node, deep=deep)


def _reject_duplicate_json_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise TemplateError(f"duplicate key {show(key)} in the JSON template")
        out[key] = value
    return out


def _parse_text(text: str, origin: str) -> Any:
    if not text.strip():
        raise TemplateError(f"the template {origin} is empty")
    if text.lstrip().startswith(("{", "[")):
        # JSON first: exact, and it gives better messages than YAML's flow syntax. If it is not
        # JSON, YAML (a superset in practice) gets its turn and reports its own error.
        try:
            return json.loads(text, object_pairs_hook=_reject_duplicate_json_keys)
        except json.JSONDecodeError:
            pass
    try:
        documents = [doc for doc in yaml.load_all(text, Loader=_TemplateLoader) if doc is not None]
    except yaml.YAMLError as exc:
        raise TemplateError(f"the template {origin} is not valid YAML/JSON: {exc}") from None
    except RecursionError:
        raise TemplateError(f"the template {origin} is nested too deeply") from None
    if not documents:
        raise TemplateError(f"the template {origin} is empty")
    if len(documents) > 1:
        raise TemplateError(
            f"the template {origin} has {len(documents)} YAML documents; a queue template is "
            "exactly one Volcano Job"
        )
    return documents[0]


def _looks_like_path(source: str) -> bool:
    return "\n" not in source and source.strip().lower().endswith(TEMPLATE_SUFFIXES)


def _read_file(path: FsPath) -> Any:
    if path.suffix.lower() not in TEMPLATE_SUFFIXES:
        raise TemplateError(f"template file {str(path)!r} must end in .yaml, .yml or .json")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TemplateError(f"template file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateError(f"template file {str(path)!r} cannot be read: {exc}") from None
    return _parse_text(text, f"file {str(path)!r}")


def _unwrap_queue_config(doc: Any) -> Any:
    """A W&B Launch queue config keeps the manifest under ``resource_args.kubernetes``."""
    if not isinstance(doc, Mapping) or "resource_args" not in doc:
        return doc
    resource_args = doc["resource_args"]
    if not isinstance(resource_args, Mapping) or "kubernetes" not in resource_args:
        found = (
            sorted(resource_args)
            if isinstance(resource_args, Mapping)
            else type_name(resource_args)
        )
        raise TemplateError(
            f"the W&B queue config has no resource_args.kubernetes (found {found}); only "
            "Kubernetes queues hold a Volcano Job"
        )
    return resource_args["kubernetes"]


def load_template(source: Any) -> Mapping[str, Any]:
    """Return the Volcano Job mapping a template source describes.

    ``source`` is a ``Path``/``os.PathLike`` or a one-line ``str`` ending in ``.yaml``,
    ``.yml`` or ``.json`` (read as a file), any other ``str``/``bytes`` (parsed as YAML or
    JSON), or a mapping; any of these may be a W&B queue config wrapping the Job in
    ``{"resource_args": {"kubernetes": ...}}``. A mapping is returned as is, not copied: the
    macro stage builds a fresh copy, so the caller's object is never changed.
    """
    if isinstance(source, Mapping):
        doc: Any = source
    elif isinstance(source, os.PathLike):
        doc = _read_file(FsPath(os.fspath(source)))
    elif isinstance(source, bytes):
        try:
            doc = _parse_text(source.decode("utf-8"), "bytes")
        except UnicodeDecodeError as exc:
            raise TemplateError(f"the template bytes are not UTF-8: {exc}") from None
    elif isinstance(source, str):
        doc = (
            _read_file(FsPath(source.strip()))
            if _looks_like_path(source)
            else _parse_text(source, "string")
        )
    else:
        raise TemplateError(
            f"a template must be a path, a YAML/JSON string or a dict, not {type_name(source)}"
        )
    doc = _unwrap_queue_config(doc)
    if isinstance(doc, list):
        raise TemplateError("the template is a list; a queue template is exactly one Volcano Job")
    if not isinstance(doc, Mapping):
        raise TemplateError(
            f"the template must be a mapping (a Volcano Job), not {type_name(doc)} {show(doc)}"
        )
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if api_version != API_VERSION or kind != KIND:
        raise TemplateError(
            f"the template must be a Volcano Job (apiVersion {API_VERSION}, kind {KIND}); got "
            f"apiVersion {show(api_version)}, kind {show(kind)}"
        )
    return doc


def load_queue_config(config: Any, resource: str | None, where: str) -> dict[str, Any]:
    """A W&B Launch queue's stored resource config (``resource``: the queue's type), checked to
    be a Kubernetes one and loaded as :func:`load_template` loads any template, as a fresh
    copy; ``where`` names the queue in errors."""
    if not config:
        raise ValueError(f"W&B Launch queue {where} has no resource config")
    if resource and resource != "kubernetes":
        raise ValueError(
            f"W&B Launch queue {where} is a {resource!r} queue; only Kubernetes queues hold a "
            "Volcano Job template"
        )
    try:
        doc = load_template(config.decode() if isinstance(config, bytes) else config)
    except TemplateError as exc:
        raise TemplateError(f"W&B Launch queue {where}: {exc}") from None
    copied: dict[str, Any] = copy_json(doc, (), "template")  # never the SDK's own object
    return copied
