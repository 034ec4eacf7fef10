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
from virtdriver.secrets import mask

LOG = logging.getLogger(__name__)
ROOT_HELPER = "sudo"  # never used: privileged calls stay in-process

_setup_lock = threading.Lock()
_ready = False


# os-brick and the oslo libraries it drives log under their own names. Their records go to
# ``virtdriver.backend.<their name>`` at DEBUG instead (the original level leads the message):
# every failure they log reaches the caller as one of our typed errors, so what they say is
# diagnostics, shown when an application enables DEBUG for ``virtdriver.backend``, and never by
# Python's last-resort handler (os-brick warns "Connection details not present" for every
# RemoteFs connector made without a mount point, for instance).
BACKEND_LOGGER = "virtdriver.backend"
FOREIGN_LOGGERS = ("os_brick", "oslo_concurrency", "oslo_privsep", "oslo.privsep")


class _Forward(logging.Handler):
    """Re-emits a foreign record under ``virtdriver.backend``, demoted to DEBUG, no traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger(f"{BACKEND_LOGGER}.{record.name}")
        if not target.isEnabledFor(logging.DEBUG):
            return
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed foreign record must not break an attach
            text = str(record.msg)
        text = mask(text)
        target.handle(logging.makeLogRecord({
            "name": target.name, "levelno": logging.DEBUG, "levelname": "DEBUG",
            "msg": "[%s] %s", "args": (record.levelname, text), "pathname": record.pathname,
            "lineno": record.lineno, "funcName": record.funcName, "created": record.created,
            "msecs": record.msecs, "thread": record.thread, "threadName": record.threadName,
            "process": record.process}))


def route_foreign_logging() -> None:
    """Send os-brick's and oslo's logging through ``virtdriver.backend`` (idempotent)."""
    for name in FOREIGN_LOGGERS:
        foreign = logging.getLogger(name)
        if not any(isinstance(h, _Forward) for h in foreign.handlers):
            foreign.addHandler(_Forward())
        foreign.propagate = False


def setup(lock_dir: Path) -> None:
    """Configure os-brick once per process."""
    global _ready
    with _setup_lock:
        if _ready:
            return
        route_foreign_logging()
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
    if protocol == "NVMEOF":
        return _connect_nvmeof(properties, lock_dir, **connector_options)
    try:
        return dict(connector_for(protocol, lock_dir, **connector_options)
                    .connect_volume(properties))
    except Exception as exc:
        raise HostConnectFailed(f"os-brick could not connect the {protocol} volume",
                                _describe(exc)) from None


NVME_FABRICS_CTL = Path("/sys/class/nvme-fabrics/ctl")


def _nvme_subsystems(properties: dict[str, Any]) -> set[str]:
    """The subsystem NQNs an NVMe-oF connection_info names (its replicas' too)."""
    targets = [properties, *(properties.get("volume_replicas") or [])]
    return {nqn for t in targets
            if isinstance(t, dict) and (nqn := t.get("target_nqn") or t.get("nqn"))}


def _nvme_controllers(nqns: set[str]) -> set[str]:
    """Names (``nvme0``) of the fabrics controllers connected to any of ``nqns``."""
    found = set()
    for ctrl in NVME_FABRICS_CTL.glob("nvme*"):
        try:
            if (ctrl / "subsysnqn").read_text().strip() in nqns:
                found.add(ctrl.name)
        except OSError:
            continue
    return found


def _connect_nvmeof(properties: dict[str, Any], lock_dir: Path,
                    **connector_options: Any) -> dict[str, Any]:
    """os-brick's NVMe-oF connect, undoing the controllers it made when it fails.

    When the namespace is not found (a wrong uuid, a namespace not mapped to this host),
    os-brick's own rollback keeps a controller whose subsystem has another namespace (it cannot
    tell it made the controller), and its forced disconnect finds no device to start from: the
    controller stayed connected. Controllers of the subsystem that appeared during this call are
    ours; they are deleted. Connects of the same subsystem are serialized across virtdriver
    processes, so no other attach can have started using such a controller meanwhile.
    """
    setup(lock_dir)  # imports os-brick and oslo the safe way first
    from oslo_concurrency import lockutils

    nqns = _nvme_subsystems(properties)
    with lockutils.lock("nvmeof-" + ",".join(sorted(nqns)), "virtdriver-", external=True,
                        lock_path=str(lock_dir)):
        before = _nvme_controllers(nqns)
        try:
            return dict(connector_for("NVMEOF", lock_dir, **connector_options)
                        .connect_volume(properties))
        except Exception as exc:
            for name in sorted(_nvme_controllers(nqns) - before):
                try:  # what ``nvme disconnect -d /dev/NAME`` does
                    Path("/sys/class/nvme", name, "delete_controller").write_text("1")
                except OSError as gone:
                    LOG.warning("could not disconnect NVMe controller %s after a failed "
                                "connect: %s", name, gone)
            raise HostConnectFailed("os-brick could not connect the NVMEOF volume",
                                    _describe(exc)) from None


def disconnect(protocol: str, properties: dict[str, Any], device_info: dict[str, Any] | None,
               lock_dir: Path, *, force: bool = False, **connector_options: Any) -> None:
    """Disconnect the host side (``force``: also what a failed connect left, errors ignored)."""
    try:
        connector = connector_for(protocol, lock_dir, **connector_options)
        if force:
            connector.disconnect_volume(properties, device_info, force=True, ignore_errors=True)
        else:
            connector.disconnect_volume(properties, device_info)
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
    return mask(f"{type(exc).__name__}: {text}")[:300]
