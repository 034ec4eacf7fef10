"""Two real libvirt daemons for live-migration tests, and ways to act at a chosen moment of one.

The source is the host's libvirtd; the destination a private libvirtd in its own mount namespace
with its own ``host_uuid`` (libvirt refuses to migrate to "the same host"). Moments are chosen by
what the daemons report (lifecycle events), by a lock held on purpose, or by a process seen
waiting for one -- never by a fixed sleep.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from testhosts.guests import Guests, open_connection
from tests.support import ROOT
from tests.support.fixtures import made_guests, opened
from tests.support.volumes import local_volume
from virtdriver import LibvirtVolumeDriver

STARTED, STOPPED = libvirt.VIR_DOMAIN_EVENT_STARTED, libvirt.VIR_DOMAIN_EVENT_STOPPED
MIGRATED_IN = libvirt.VIR_DOMAIN_EVENT_STARTED_MIGRATED
MIGRATED_OUT = libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED


@pytest.fixture(scope="module")
def destination_daemon() -> Iterator[Any]:
    from testhosts.guests import private_libvirtd as pl

    reason = pl.available()
    if reason is not None:
        pytest.skip(f"no second libvirtd: {reason}")
    with pl.PrivateLibvirtd(host_uuid=str(uuid.uuid4())) as daemon:
        yield daemon


@pytest.fixture
def dest_conn(destination_daemon) -> Iterator[libvirt.virConnect]:
    yield from opened(destination_daemon.uri)


@pytest.fixture
def dest_guests(dest_conn) -> Iterator[Guests]:
    yield from made_guests(dest_conn)


@pytest.fixture
def drivers(destination_daemon, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    source = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "source")
    destination = LibvirtVolumeDriver(destination_daemon.uri, state_dir=tmp_path / "destination")
    yield source, destination
    source.close()
    destination.close()


def migration_uri() -> str:
    with socket.socket() as probe:  # a free port for QEMU's migration stream
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


def shared_volume(guests: Guests, source: Any, device: str, *, persistent: bool = True,
                  info: dict[str, Any] | None = None) -> tuple[Any, Any, dict, str]:
    """Guests A and B on the source, one multiattach volume read-write to A, read-only to B
    (``info``: its connection_info, by default a local volume on ``device``)."""
    a, b = guests.start("a", persistent=persistent), guests.start("b")
    info = local_volume(device, multiattach=True) if info is None else info
    source.attach_volume(info, a.name())
    source.attach_volume(info, b.name(), attach_mode="ro")
    return a, b, info, info["data"]["volume_id"]


def arriving_notes(driver: Any) -> list[dict[str, Any]]:
    return [a for vid in driver.records.connected() for a in driver.records.load(vid).arriving]


def runs_on(conn: libvirt.virConnect, name: str) -> bool:
    try:
        return bool(conn.lookupByName(name).isActive())
    except libvirt.libvirtError:
        return False


# ---- the CLI as a real process ------------------------------------------------------------------

def cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "virtdriver", *argv]


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli(*argv), cwd=ROOT, capture_output=True, text=True, timeout=180,
                          check=False)


def start_cli(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(cli(*argv), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def migrate_argv(source: Any, destination: Any, guest: str, volume: Path,
                 *extra: str) -> list[str]:
    return ["--state-dir", str(source.state_dir), "migrate", guest, "--to", destination.uri,
            "--volume", str(volume), "--dest-state-dir", str(destination.state_dir),
            "--migration-uri", migration_uri(), *extra]


def volume_file(tmp_path: Path, info: dict[str, Any], name: str = "volume.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(info))
    return path


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll a state that announces itself by no event (another process's open files)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (a lock it is waiting for, or holds)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


def lock_file(driver: Any, volume_id: str) -> Path:
    from virtdriver.hypervisor.locks import file_token

    return driver.lock_dir / f"volume-{file_token(volume_id)}.lock"


def stop_process(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGSTOP)


def resume_with(proc: subprocess.Popen[str], sig: int) -> None:
    """Queue ``sig`` while the process is stopped, then let it run: the signal is handled as
    soon as it runs again, after whatever the daemons did meanwhile."""
    proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)


# ---- lifecycle events as moments ----------------------------------------------------------------

class Lifecycle:
    """Lifecycle events of one connection; :meth:`when` runs an action the moment one comes,
    :meth:`wait` blocks until one came (bounded)."""

    def __init__(self, uri: str) -> None:
        self.conn = open_connection(uri)
        self._cond = threading.Condition()
        self._seen: list[tuple[str, int, int]] = []
        self._actions: list[tuple[str, int, int, Callable[[], None]]] = []
        self._id = self.conn.domainEventRegisterAny(
            None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._event, None)

    def _event(self, conn: Any, dom: libvirt.virDomain, event: int, detail: int,
               opaque: Any) -> None:
        key = (dom.name(), event, detail)
        with self._cond:
            self._seen.append(key)
            due = [a for a in self._actions if a[:3] == key]
            self._actions = [a for a in self._actions if a[:3] != key]
            self._cond.notify_all()
        for *_, action in due:
            action()

    def when(self, name: str, event: int, detail: int, action: Callable[[], None]) -> None:
        with self._cond:
            self._actions.append((name, event, detail, action))

    def wait(self, name: str, event: int, detail: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while (name, event, detail) not in self._seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no lifecycle event {event}/{detail} of {name} "
                                         f"in {timeout} s")
                self._cond.wait(left)

    def close(self) -> None:
        try:
            self.conn.domainEventDeregisterAny(self._id)
            self.conn.close()
        except libvirt.libvirtError:
            pass
