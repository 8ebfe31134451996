"""Airflow hook for Weights & Biases: the ``wandb`` connection type and W&B's public API.

Connection fields: password = API key, host = base URL (empty for W&B's cloud), extras
``entity`` and ``project`` (defaults for runs and queues); see ``docs/wandb.md``. ``wandb.Api``
is imported lazily, so DAG parsing and the triggerer never load it. A run's reads and writes
are ``wandb_runs.py`` (mixed in), a Launch queue's ``wandb_queue.py``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.airflow_compat import AirflowNotFoundException, BaseHook, mask_secret
from airflow_volcano_wandb.hooks.wandb_queue import read_queue
from airflow_volcano_wandb.hooks.wandb_runs import WandbRunAccess
from airflow_volcano_wandb.wandb.connection_form import WANDB_CONN_FIELDS, WANDB_UI_FIELD_BEHAVIOUR
from airflow_volcano_wandb.wandb.key_forms import key_forms
from airflow_volcano_wandb.wandb.wandb_queue_ref import QueueTemplate, parse_queue_ref
from airflow_volcano_wandb.wandb.wandb_urls import is_default_base_url, run_url

if TYPE_CHECKING:
    from airflow.sdk import Connection

__all__ = ["WANDB_CONN_FIELDS", "WANDB_UI_FIELD_BEHAVIOUR", "WandbHook"]

#: How long one shared hook (:meth:`WandbHook.shared`) serves its process before another is
#: made: a key changed in the connection reaches the waits within this time.
SHARED_HOOK_SECONDS = 600.0
_shared: dict[tuple, tuple[float, WandbHook]] = {}
_shared_lock = threading.Lock()


def _mask(api_key: str | None) -> None:
    """Mask the key in this process's logs in every form a log may show it (``key_forms``):
    plain (Airflow masks only the passwords it loads itself), base64 (a Secret in an API
    response or its DEBUG log) and ``Basic`` credentials (a trainer's HTTP debug log)."""
    for form in key_forms(api_key) if api_key else ():
        mask_secret(form, name="WANDB_API_KEY")


class WandbHook(WandbRunAccess, BaseHook):
    """Talk to Weights & Biases with the credentials of an Airflow ``wandb`` connection; a
    missing one is logged and behaves as an empty one (``docs/wandb.md``).

    :param wandb_conn_id: The connection id; ``None`` means "no connection, use defaults".
    :param timeout: HTTP timeout in seconds for W&B API calls (``None``: the SDK's default).
    :param deadline: wall-clock bound in seconds on each run read or write
        (:meth:`get_run_summary`, :meth:`edit_run`, :meth:`run_artifacts`), retries included:
        the SDK retries past ``timeout``. ``None``: unbounded. See ``deadline.call_within``.
    """

    conn_name_attr = "wandb_conn_id"
    default_conn_name = "wandb_default"
    conn_type = "wandb"
    hook_name = "Weights & Biases"

    def __init__(
        self,
        wandb_conn_id: str | None = default_conn_name,
        *,
        timeout: int | None = None,
        deadline: float | None = None,
    ) -> None:
        super().__init__()
        self.wandb_conn_id, self.timeout, self.deadline = wandb_conn_id, timeout, deadline
        # Made once per hook under its own lock, not functools.cached_property's: on Python
        # 3.11 one for every instance, so one wandb.Api() that never answered (a read abandoned
        # by its deadline) blocked every other hook's reads in the process, for good.
        self._making = threading.RLock()
        self._connection: tuple[Connection | None] | None = None
        self._api: Any = None
        self._summaries_read: set[str] = set()

    @classmethod
    def shared(cls, conn_id: str, *, timeout: int, deadline: float) -> WandbHook:
        """This process's hook for ``conn_id``, made again after :data:`SHARED_HOOK_SECONDS`:
        the waits of a triggerer or a sensor's process read through one ``wandb.Api`` (one key
        lookup, one HTTP session), each read still fresh (:meth:`get_run_summary`)."""
        key, now = (conn_id, timeout, deadline), time.monotonic()
        with _shared_lock:
            made_at, hook = _shared.get(key, (now, None))
            if hook is None or now - made_at >= SHARED_HOOK_SECONDS:
                hook = cls(conn_id, timeout=timeout, deadline=deadline)
                _shared[key] = (now, hook)
        return hook

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Return the extra fields of the connection form (entity, project)."""
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import StringField

        return {
            name: StringField(
                lazy_gettext(field["label"]),
                widget=BS3TextFieldWidget(),
                description=field["description"],
            )
            for name, field in WANDB_CONN_FIELDS.items()
        }

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Return which standard fields the connection form hides and how it labels the rest."""
        return {
            "hidden_fields": list(WANDB_UI_FIELD_BEHAVIOUR["hidden-fields"]),
            "relabeling": dict(WANDB_UI_FIELD_BEHAVIOUR["relabeling"]),
            "placeholders": dict(WANDB_UI_FIELD_BEHAVIOUR["placeholders"]),
        }

    @property
    def connection(self) -> Connection | None:
        """The Airflow connection, or ``None`` when it is not defined (see the class doc)."""
        with self._making:
            if self._connection is None:
                self._connection = (self._read_connection(),)
        return self._connection[0]

    def _read_connection(self) -> Connection | None:
        if not self.wandb_conn_id:
            return None
        try:
            conn = self.get_connection(self.wandb_conn_id)
        except AirflowNotFoundException:
            self.log.warning(
                "W&B connection %r is not defined; using defaults (W&B cloud, no API key, "
                "no default entity or project). That is fine for offline runs.",
                self.wandb_conn_id,
            )
            return None
        _mask(conn.password)
        return conn

    def mask_api_key(self) -> str | None:
        """Register the connection's key with this process's log masker, quietly (a missing
        connection has no key to hide); the key, or ``None``. For processes that print what
        pods print (a trainer may echo its environment) but never use the key."""
        if not self.wandb_conn_id:
            return None
        if self._connection is not None:  # already loaded, and masked
            return self.api_key
        with contextlib.suppress(AirflowNotFoundException):
            key = self.get_connection(self.wandb_conn_id).password
            _mask(key)
            return key or None
        return None

    @property
    def api_key(self) -> str | None:
        """The API key (the connection password), registered with the log masker."""
        conn = self.connection
        return conn.password if conn is not None and conn.password else None

    @property
    def base_url(self) -> str | None:
        """The W&B API address (``docs/wandb.md``: a bare host means ``https://<host>``, with
        the connection's port); ``None`` for W&B's cloud."""
        conn = self.connection
        if conn is None or not conn.host or not conn.host.strip():
            return None
        host = conn.host.strip().rstrip("/")
        if "://" not in host:
            host = f"https://{host}" + (f":{conn.port}" if conn.port else "")
        return None if is_default_base_url(host) else host

    @property
    def entity(self) -> str | None:
        """Default entity from the connection extras."""
        return self._extra("entity")

    @property
    def project(self) -> str | None:
        """Default project from the connection extras."""
        return self._extra("project")

    def _extra(self, name: str) -> str | None:
        extras = self.connection.extra_dejson if self.connection is not None else {}
        # Older connection forms stored custom fields as extra__<conn_type>__<name>.
        value = extras.get(name) or extras.get(f"extra__{self.conn_type}__{name}")
        return None if value is None else (str(value).strip() or None)

    def run_url(self, run_id: str, *, entity: str | None = None, project: str | None = None) -> str:
        """Return the UI address of a run, using the connection's server and defaults."""
        entity, project = entity or self.entity, project or self.project
        if not entity or not project:
            raise ValueError("a W&B run URL needs an entity and a project")
        return run_url(self.base_url, entity, project, run_id)

    def get_conn(self) -> Any:
        """Return a ``wandb.Api`` client for this connection: its key checked with the server
        (one GraphQL ``viewer`` query), the SDK's ``wandb-core`` started on first use."""
        import wandb

        defaults = {"base_url": self.base_url, "entity": self.entity, "project": self.project}
        kwargs: dict[str, Any] = {"overrides": {k: v for k, v in defaults.items() if v}}
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        if self.api_key:
            kwargs["api_key"] = self.api_key
        return wandb.Api(**kwargs)

    def test_connection(self) -> tuple[bool, str]:
        """Check the API key with the server (the connection form's "Test" button)."""
        try:
            api = self.get_conn()
            return True, f"Connected to W&B as {api.default_entity!r}"
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"

    @property
    def api(self) -> Any:
        """A ``wandb.Api`` client, made once per hook (see :meth:`get_conn`)."""
        with self._making:
            if self._api is None:
                self._api = self.get_conn()
        return self._api

    def get_queue(self, ref: str) -> QueueTemplate:
        """A W&B Launch queue's template and its template variables, from a
        ``wandb-queue://<entity>/<queue>`` reference (the entity may come from the connection).

        :raises ValueError: for a malformed reference, a queue that is missing, has no
            resource config or is not a Kubernetes queue.
        """
        parsed = parse_queue_ref(ref)
        return read_queue(self.api, self._queue_entity(parsed.entity), parsed.queue)

    def get_queue_template(self, entity: str | None, queue_name: str) -> dict[str, Any]:
        """Return the resource config (the Volcano Job template) of a W&B Launch queue, macros
        such as ``${run_id}`` untouched; :meth:`get_queue` gives its template variables too.

        :param entity: The queue's entity; ``None`` uses the connection's.
        :raises ValueError: when the queue has no resource config or is not a Kubernetes
            queue, or the config is not a mapping.
        """
        entity = self._queue_entity(entity)  # before the client: no call without an entity
        return read_queue(self.api, entity, queue_name).template

    def get_template(self, ref: str) -> dict[str, Any]:
        """Load a template from a ``wandb-queue://<entity>/<queue>`` reference."""
        return self.get_queue(ref).template

    def _queue_entity(self, entity: str | None) -> str:
        entity = entity or self.entity
        if not entity:
            raise ValueError("a W&B Launch queue needs an entity (argument or connection)")
        return entity
