"""os-brick, set up the way a process that is already root needs it, loaded lazily.

- privileged calls run in-process (there is no ``sudo`` to start ``privsep-helper``);
- ``[oslo_concurrency] lock_path`` is set before connectors that take external locks are used;
- importing os-brick pulls in eventlet and its deprecation warnings: they are kept out of output.
"""

from __future__ import annotations

import functools
import logging
import threading
import warnings
from pathlib import Path
from typing import Any

from virtdriver.errors import HostConnectFailed

LOG = logging.getLogger(__name__)
ROOT_HELPER = "sudo"  # never used: privileged calls stay in-process

_setup_lock = threading.Lock()
_ready = False


def setup(lock_dir: Path) -> None:
    """Configure os-brick once per process."""
    global _ready
    with _setup_lock:
        if _ready:
            return
        _import_in_own_thread()
        import os_brick
        import os_brick.privileged
        from oslo_concurrency import lockutils
        from oslo_config import cfg

        lock_dir.mkdir(parents=True, exist_ok=True)
        # The default only: an embedding service that configured lock_path keeps its own.
        lockutils.set_defaults(str(lock_dir))
        os_brick.setup(cfg.CONF)
        os_brick.privileged.default.set_client_mode(False)
        _ready = True


def _import_in_own_thread() -> None:
    """Import os-brick (and so eventlet) in a throwaway thread, never the caller's.

    eventlet's hub imports a second copy of ``threading`` (``patcher.original``); that copy makes
    the importing thread its "main thread" and replaces the thread's end-of-life lock, so a
    ``join()`` of that thread never returns (a ThreadPoolExecutor worker that made the first
    attach would hang its pool's shutdown). A daemon thread nobody joins takes that hit instead.
    """
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import os_brick.initiator.connector  # noqa: F401
                import os_brick.privileged  # noqa: F401
                import oslo_concurrency.lockutils  # noqa: F401
                import oslo_config.cfg  # noqa: F401
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="virtdriver-os-brick-import", daemon=True).start()
    done.wait()
    if failure:
        raise failure[0]


@functools.lru_cache(maxsize=64)
def connector_for(protocol: str, lock_dir: Path, *, use_multipath: bool = False,
                  **extra: Any) -> Any:
    """An os-brick connector for ``protocol`` (ISCSI, LOCAL, NFS, ...), made once and reused.

    ``extra`` carries connector-specific settings (e.g. a mount point base), hashable values only.
    """
    setup(lock_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from os_brick.initiator import connector

    return connector.InitiatorConnector.factory(
        protocol, ROOT_HELPER, use_multipath=use_multipath, device_scan_attempts=3, **extra)


def connector_properties(lock_dir: Path, *, my_ip: str = "127.0.0.1",
                         multipath: bool = False) -> dict[str, Any]:
    """os-brick's host connector properties (initiator name, host, NQN, ...)."""
    setup(lock_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from os_brick.initiator import connector

    try:
        return dict(connector.get_connector_properties(ROOT_HELPER, my_ip, multipath, False))
    except Exception as exc:  # os-brick raises many unrelated types
        raise HostConnectFailed("cannot read the host's connector properties", str(exc)) from None


def connect(protocol: str, properties: dict[str, Any], lock_dir: Path,
            **connector_options: Any) -> dict[str, Any]:
    """Connect the host side; returns os-brick's device info (``path`` among it)."""
    try:
        return dict(connector_for(protocol, lock_dir, **connector_options)
                    .connect_volume(properties))
    except Exception as exc:
        raise HostConnectFailed(f"os-brick could not connect the {protocol} volume",
                                _describe(exc)) from None


def disconnect(protocol: str, properties: dict[str, Any], device_info: dict[str, Any] | None,
               lock_dir: Path, **connector_options: Any) -> None:
    """Disconnect the host side."""
    try:
        connector_for(protocol, lock_dir, **connector_options).disconnect_volume(properties,
                                                                                 device_info)
    except Exception as exc:
        raise HostConnectFailed(f"os-brick could not disconnect the {protocol} volume",
                                _describe(exc)) from None


def extend(protocol: str, properties: dict[str, Any], lock_dir: Path,
           **connector_options: Any) -> int | None:
    """os-brick's extend (rescan) for connectors that have one; the new size, or ``None``.

    ``connector_options`` are those the volume was connected with (a share's mount point base):
    the connector is the same one. Connectors for files on a share have no extend (the file grows
    on the share and QEMU's block resize does the rest): ``None``.
    """
    try:
        size = connector_for(protocol, lock_dir, **connector_options).extend_volume(properties)
    except NotImplementedError:
        return None
    except Exception as exc:
        raise HostConnectFailed(f"os-brick could not extend the {protocol} volume",
                                _describe(exc)) from None
    return int(size) if size is not None else None


def _describe(exc: Exception) -> str:
    """os-brick's message without anything that might carry a secret (it echoes commands)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]
