"""The local service: record, calculate, match, derive and book on the user's own machine (issue 18).

It implements the service's routes (``service-contract.md`` and the §16.5 scenario routes) over a
SQLite store under ``<BIR_HOME>/local/``, and the runner reaches it in process: the existing
``ServiceClient`` over ``httpx.ASGITransport`` with the base URL ``LOCAL_URL``, so nothing above the
client changes::

    async with open_local_service(home, project=project_dir) as local:
        async with ServiceClient(local.base_url, "local", transport=local.transport) as service:
            ...

Imports are lazy: ``bir.hooks.local`` itself loads neither SQLite nor the model.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import httpx

    from bir.core.service import ServiceClient
    from bir.hooks.local.runtime import LocalService

LOCAL_URL: Final = "http://local.bir"
# The token the client sends the local service; there is one user on this machine and it is not checked.
LOCAL_TOKEN: Final = "local"


def wants_local(env: Mapping[str, str] | None = None) -> bool:
    """Whether this machine uses the local service: ``BIR_SERVICE`` forces one, and unset, the local
    service is the default when no service is configured (no ``BIR_AUTH_URL``, not signed in).

    Raises:
        ConfigError: ``BIR_SERVICE`` holds something else.
    """
    from bir.core import config, credentials

    choice = config.get_str("BIR_SERVICE", env)
    if choice is not None:
        return choice == "local"
    if config.get_str("BIR_AUTH_URL", env):
        return False
    signed_in = credentials.effective()
    return signed_in is None or not signed_in.url


@dataclass(frozen=True)
class Local:
    """An open local service: the transport and base URL a ``ServiceClient`` is built on, and the service."""

    service: LocalService
    transport: httpx.AsyncBaseTransport
    base_url: str = LOCAL_URL


@contextlib.asynccontextmanager
async def local_client(
    home: Path | None = None,
    *,
    project: str | os.PathLike[str] | None = None,
    pool: Any | None = None,
    load_model: bool = True,
) -> AsyncIterator[ServiceClient]:
    """A ``ServiceClient`` on the local service (``open_local_service``), for the block's duration.

    Raises:
        StoreError: the store file is not a bir store, is corrupt, or cannot be opened.
    """
    from bir.core.service import ServiceClient

    async with (
        open_local_service(home, project=project, pool=pool, load_model=load_model) as local,
        ServiceClient(local.base_url, LOCAL_TOKEN, transport=local.transport) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def open_local_service(
    home: Path | None = None,
    *,
    project: str | os.PathLike[str] | None = None,
    pool: Any | None = None,
    load_model: bool = True,
) -> AsyncIterator[Local]:
    """The local service over the store under ``home`` (``BIR_HOME``), for the block's duration.

    ``project`` is the project whose runs this control server records and matches (rows carry it);
    ``pool`` an evaluator pool to run self-checks in (else the service starts a one-worker pool when it
    first needs one); ``load_model`` False keeps the embedding model out (a command that only reads).

    Raises:
        StoreError: the store file is not a bir store, is corrupt, or cannot be opened.
    """
    import httpx

    from bir.hooks.local.app import build_app
    from bir.hooks.local.runtime import opened

    async with opened(home, project=project, pool=pool, load_model=load_model) as service:
        yield Local(service, httpx.ASGITransport(app=build_app(service)))


def store_summary(home: Path | None = None) -> dict[str, Any]:
    """How full the local store is, for ``bir status`` and ``bir doctor``: its path, its recorded bytes
    against its limit, its runs and ready scenarios; ``error`` when the file cannot be used. Never raises."""
    from bir.core import config
    from bir.hooks.local.store import Store, StoreError, default_path

    path = default_path(home if home is not None else config.home())
    limit = config.require_int("BIR_LOCAL_STORE_MB") * 1024 * 1024
    out: dict[str, Any] = {"path": str(path), "limitBytes": limit}
    if not path.exists():
        return {**out, "exists": False, "bytes": 0, "runs": 0, "ready": 0}
    try:
        store = Store(path)
    except StoreError as exc:
        return {**out, "exists": True, "error": str(exc)}
    try:
        counts = store.counts()
        return {
            **out,
            "exists": True,
            "bytes": store.size_bytes(),
            "runs": counts["runs"],
            "ready": counts["ready"],
            "scenarios": counts["scenarios"],
            "executions": counts["executions"],
        }
    except StoreError as exc:
        return {**out, "exists": True, "error": str(exc)}
    finally:
        store.close()
