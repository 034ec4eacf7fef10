"""A libvirtd of one's own (for tests and benchmarks), to kill, restart or break on purpose.

The host's libvirtd is shared with everything else on the machine (other test runs included), so
the tests never kill or reconfigure it. Instead this starts a second, ordinary system-mode
libvirtd in a private mount namespace (``unshare --mount``) where its state directories are bind
mounts of a private directory::

    BASE/run   -> /run/libvirt        (sockets, status XML, pid files)
    BASE/lib   -> /var/lib/libvirt    (monitor sockets)
    BASE/etc   -> /etc/libvirt        (libvirtd.conf, qemu.conf, persistent definitions)
    BASE/cache -> /var/cache/libvirt  (seeded with the host's QEMU capabilities: no 4 s probe)

QEMU runs as root without a security driver and logs to /var/log/libvirt/qemu like the host's
(``stdio_handler = "file"``: no virtlogd needed). Clients reach it through
``qemu+unix:///system?socket=BASE/run/libvirt-sock``. Restarting it starts a fresh namespace with
the same bind mounts, so the restarted daemon finds its running guests again, as after a host
daemon restart. Where the host runs libvirt's split daemons, it is a virtqemud (socket
``virtqemud-sock``, configuration ``virtqemud.conf``) in the same way. Only the daemon this
object started is ever signalled, by its pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import libvirt

from testhosts.guests import SYSTEM_SOCKETS, open_connection, system_daemon

QEMU_CONF = ('user = "root"\ngroup = "root"\nsecurity_driver = "none"\n'
             'stdio_handler = "file"\n')
BINDS = {"run": "/run/libvirt", "lib": "/var/lib/libvirt", "etc": "/etc/libvirt",
         "cache": "/var/cache/libvirt"}
HOST_CAPS = Path("/var/cache/libvirt/qemu/capabilities")


def available() -> str | None:
    """Why a private libvirtd cannot run here, or ``None`` when it can."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in (system_daemon() or "libvirtd", "unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


class PrivateLibvirtd:
    def __init__(self, *, host_uuid: str | None = None) -> None:
        """``host_uuid`` makes the daemon another host as far as libvirt is concerned (a live
        migration between two daemons of one machine is refused when both report the same)."""
        self.base = Path(tempfile.mkdtemp(prefix="vdlvd-", dir="/tmp"))
        for name in BINDS:
            (self.base / name).mkdir()
        (self.base / "lib" / "qemu").mkdir()
        (self.base / "etc" / "qemu.conf").write_text(QEMU_CONF)
        # the host's kind of daemon: libvirtd, or virtqemud where the split daemons run
        self.daemon = system_daemon() or "libvirtd"
        (self.base / "etc" / f"{self.daemon}.conf").write_text(
            f'host_uuid = "{host_uuid}"\n' if host_uuid else "")
        if HOST_CAPS.is_dir():
            shutil.copytree(HOST_CAPS, self.base / "cache" / "qemu" / "capabilities")
        script = ["#!/bin/sh", "set -e"]
        script += [f"mount --bind {self.base / name} {target}" for name, target in BINDS.items()]
        script.append(f"exec {self.daemon} --pid-file {self.base / 'libvirtd.pid'}")
        self.start_script = self.base / "start.sh"
        self.start_script.write_text("\n".join(script) + "\n")
        self.start_script.chmod(0o700)
        self.socket = self.base / "run" / SYSTEM_SOCKETS[self.daemon]
        self.uri = f"qemu+unix:///system?socket={self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    # ---- life cycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.socket.unlink(missing_ok=True)
        log = open(self.base / "libvirtd.log", "ab")
        try:
            self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                                          str(self.start_script)],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"private libvirtd exited with {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            if self.socket.exists():
                try:
                    open_connection(self.uri).close()
                    return
                except libvirt.libvirtError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"private libvirtd gave no socket in {timeout} s: "
                                   f"{self.log_tail()}")
            time.sleep(0.05)

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
        """Signal the daemon we started (by its pid) and wait for it to be gone."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def restart(self, sig: int = signal.SIGKILL) -> None:
        """Kill (SIGKILL: a crash; SIGTERM: a clean stop) and start again."""
        self.kill(sig)
        self.start()
        self.restarts += 1

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def in_namespace(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run a command in the daemon's mount namespace (e.g. to remount its config dir)."""
        return subprocess.run(["nsenter", "-t", str(self.pid), "-m", "--", *argv],
                              capture_output=True, text=True, check=True, timeout=30)

    def log_tail(self, size: int = 2000) -> str:
        try:
            return (self.base / "libvirtd.log").read_text(errors="replace")[-size:]
        except OSError:
            return ""

    # ---- clean-up ------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove every guest, stop the daemon, delete the directory (also after failures)."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    conn = open_connection(self.uri)
                    for dom in conn.listAllDomains(0):
                        for action in (dom.destroy, dom.undefine):
                            try:
                                action()
                            except libvirt.libvirtError:
                                pass
                    conn.close()
                except libvirt.libvirtError:
                    pass
            self._kill_leftover_qemu()
        finally:
            self.kill(signal.SIGTERM)
            shutil.rmtree(self.base, ignore_errors=True)

    def _kill_leftover_qemu(self) -> None:
        """QEMU processes this daemon started and could not destroy (only ours: by pid file)."""
        for pid_file in (self.base / "run" / "qemu").glob("*.pid"):
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass

    def __enter__(self) -> PrivateLibvirtd:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
