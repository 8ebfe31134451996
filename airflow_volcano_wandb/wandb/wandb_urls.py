"""W&B addresses: the API a connection names, the web UI it maps to, a run's page (pure)."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

DEFAULT_BASE_URL = "https://api.wandb.ai"
DEFAULT_APP_URL = "https://wandb.ai"

# wandb>=0.26 ships CoreWeave Forge as its built-in default API address; it fronts the same
# multi-tenant cloud as api.wandb.ai, so a connection naming it is still "the default" and
# needs no WANDB_BASE_URL in the pods.
_FORGE_HOSTS = {"forge.coreweave.com", "api.forge.coreweave.com"}
_FORGE_APP_URL = "https://forge.coreweave.com/wandb"


def check_base_url(base_url: str) -> None:
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"invalid W&B base URL {base_url!r}: needs http(s)://host")


def normalise_url(url: str) -> str:
    return url.strip().rstrip("/")


def is_default_base_url(base_url: str | None) -> bool:
    """Whether ``base_url`` names W&B's multi-tenant cloud (so pods need no WANDB_BASE_URL)."""
    if base_url is None or not base_url.strip():
        return True
    parts = urlsplit(normalise_url(base_url))
    if parts.scheme != "https" or parts.port is not None:
        return False
    path = parts.path.rstrip("/")
    # The Forge address is the default of newer SDKs: https://api.forge.coreweave.com and
    # its proxy path https://forge.coreweave.com/api/wandb.
    if parts.hostname in ("api.wandb.ai", "api.forge.coreweave.com"):
        return path == ""
    return parts.hostname == "forge.coreweave.com" and path == "/api/wandb"


def app_url(base_url: str | None) -> str:
    """Map a W&B API address to the address of its web UI.

    Mirrors ``wandb.util.api_to_app_url`` (kept in sync by a unit test), except that the
    cloud API ``https://api.wandb.ai`` maps to ``https://wandb.ai`` (newer SDKs point it at
    CoreWeave Forge's UI; wandb.ai is the address W&B users know and it keeps working); a
    dedicated or on-prem ``https://api.<domain>`` at ``https://app.<domain>``; any other
    address (``wandb/local``, a self-hosted server behind one host name) is its own UI host.
    """
    if base_url is None or not base_url.strip():
        return DEFAULT_APP_URL
    url = normalise_url(base_url)
    host = urlsplit(url).hostname or ""
    if host in _FORGE_HOSTS:
        return _FORGE_APP_URL
    if "://api.wandb.test" in url:
        return url.replace("://api.", "://app.")
    if "://api.wandb." in url:
        return url.replace("://api.", "://")
    if "://api." in url:
        return url.replace("://api.", "://app.")
    return url


def run_url(base_url: str | None, entity: str, project: str, run_id: str) -> str:
    """Return ``<app host>/<entity>/<project>/runs/<run_id>``, the run's page in the W&B UI."""
    # Entity, project and run id are URL path segments; quoting keeps an odd project name
    # from producing a link to some other page.
    segments = "/".join(quote(part, safe="") for part in (entity, project, "runs", run_id))
    return f"{app_url(base_url)}/{segments}"
