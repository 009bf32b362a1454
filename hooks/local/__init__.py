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
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import httpx

    from bir.core.config import Settings
    from bir.core.service import ServiceClient
    from bir.hooks.local.runtime import LocalService

LOCAL_URL: Final = "http://local.bir"
# The token the client sends the local service; there is one user on this machine and it is not checked.
LOCAL_TOKEN: Final = "local"


def wants_local(settings: Settings) -> bool:
    """Whether this machine uses the local service: ``BIR_SERVICE`` forces one, and unset, the local
    service is the default when no service is configured (no ``BIR_AUTH_URL``, not signed in)."""
    from bir.core import credentials

    if settings.service is not None:
        return settings.service == "local"
    if settings.auth_url:
        return False
    signed_in = credentials.effective(settings)
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
    settings: Settings | None = None,
) -> AsyncIterator[ServiceClient]:
    """A ``ServiceClient`` on the local service (``open_local_service``), for the block's duration.

    Raises:
        StoreError: the store file is not a bir store, is corrupt, or cannot be opened.
    """
    from bir.core.service import ServiceClient

    async with (
        open_local_service(home, project=project, pool=pool, load_model=load_model, settings=settings) as local,
        ServiceClient(local.base_url, LOCAL_TOKEN, transport=local.transport, settings=settings) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def open_local_service(
    home: Path | None = None,
    *,
    project: str | os.PathLike[str] | None = None,
    pool: Any | None = None,
    load_model: bool = True,
    settings: Settings | None = None,
) -> AsyncIterator[Local]:
    """The local service over the store under ``home`` (else ``BIR_HOME``), for the block's duration,
    on ``settings`` (read now when None).

    ``project`` is the project whose runs this control server records and matches (rows carry it);
    ``pool`` an evaluator pool to run self-checks in (else the service starts a one-worker pool when it
    first needs one); ``load_model`` False keeps the embedding model out (a command that only reads).

    Raises:
        StoreError: the store file is not a bir store, is corrupt, or cannot be opened.
    """
    import httpx

    from bir.hooks.local.app import build_app
    from bir.hooks.local.runtime import opened

    async with opened(home, project=project, pool=pool, load_model=load_model, settings=settings) as service:
        yield Local(service, httpx.ASGITransport(app=build_app(service)))


def store_summary(settings: Settings) -> dict[str, Any]:
    """How full the local store is, for ``bir status`` and ``bir doctor``: its path, its recorded bytes
    against its limit, its runs and ready scenarios; ``error`` when the file cannot be used. Never raises."""
    from bir.hooks.local.store import Store, StoreError, default_path

    path = default_path(settings.home)
    limit = settings.local_store_mb * 1024 * 1024
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
