"""Boot the test guest with libvirt (direct kernel boot, TCG) and run commands in it.

This host's KVM runs only kernels built for it ("PVM"); Debian's kernel boots under QEMU's TCG,
so the guest is ``<domain type='qemu'>``. Commands go over a virtio-serial port bound to a unix
socket on the host (no network): :meth:`LinuxGuest.run` sends a shell script and returns its
output and exit code (see ``init.sh`` for the protocol).

The socket's path is libvirt's own choice (``<source mode='bind'/>`` without a path: a file in
libvirt's channel directory for the domain), read back from the live XML. So the guest can be
live-migrated: libvirt leaves such a path out of the migratable XML and the destination binds
one of its own, where a fixed path would be bound by both QEMUs during the migration and
unlinked by the source's libvirt when the source QEMU stops. :meth:`LinuxGuest.moved` follows
the guest to its new host.
"""

from __future__ import annotations

import base64
import secrets
import socket
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import libvirt

from testhosts.guests import ignore_gone

NAME_PREFIX = "vdtest-lg-"
RUN_DIR = Path("/var/tmp/virtdriver-linuxguest/run")
CHANNEL = "vd.cmd"
# no_timer_check: on a loaded host, TCG can miss the kernel's IO-APIC timer check, which then
# panics ("IO-APIC + timer doesn't work!"); the check only matters on real hardware.
CMDLINE = "console=ttyS0 quiet loglevel=3 panic=-1 no_timer_check rdinit=/init"


class GuestCommandError(RuntimeError):
    """The guest did not answer in time, or the channel broke."""


@dataclass(frozen=True)
class Result:
    """What a command printed (stdout and stderr together) and its exit code."""
    output: str
    rc: int

    @property
    def ok(self) -> bool:
        return self.rc == 0


def domain_xml(name: str, image: Path, log_path: Path, memory_mib: int = 256) -> str:
    return f"""<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>{memory_mib}</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64'>hvm</type>
    <kernel>{image / 'vmlinuz'}</kernel>
    <initrd>{image / 'initrd.gz'}</initrd>
    <cmdline>{CMDLINE}</cmdline>
  </os>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <controller type='scsi' index='0' model='virtio-scsi'/>
    <controller type='virtio-serial' index='0'/>
    <serial type='file'><source path='{log_path}' append='on'/><target port='0'/></serial>
    <channel type='unix'>
      <source mode='bind'/>
      <target type='virtio' name='{CHANNEL}'/>
    </channel>
    <memballoon model='none'/>
  </devices>
</domain>
"""


def channel_path(dom: libvirt.virDomain) -> Path:
    """The unix socket libvirt bound for the guest's command port (live XML)."""
    root = ET.fromstring(dom.XMLDesc(0))
    for channel in root.iterfind("devices/channel"):
        target, source = channel.find("target"), channel.find("source")
        if target is not None and target.get("name") == CHANNEL and source is not None:
            if source.get("path"):
                return Path(source.get("path", ""))
    raise GuestCommandError(f"{dom.name()}: no unix socket for channel {CHANNEL} in its XML")


class LinuxGuest:
    """One running test guest; :meth:`run` executes shell in it."""

    def __init__(self, dom: libvirt.virDomain, socket_path: Path, log_path: Path) -> None:
        self.dom = dom
        self.socket_path = socket_path
        self.log_path = log_path
        self.boot_seconds: float | None = None
        self._sock: socket.socket | None = None
        self._buf = b""

    def name(self) -> str:
        return self.dom.name()

    def moved(self, dom: libvirt.virDomain, socket_path: Path) -> None:
        """The guest now runs as ``dom`` (on another host), its port bound at ``socket_path``
        (as this process sees that host's files). An answer still in flight is dropped."""
        self.close()
        self._buf = b""
        self.dom, self.socket_path = dom, socket_path

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(self.socket_path))
            self._sock = sock
        return self._sock

    def _line(self, deadline: float) -> str:
        sock = self._connect()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise GuestCommandError(f"{self.name()}: no answer in time; console: "
                                        f"{self.console_tail()!r}")
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                chunk = b""
                reason = f"command channel broke ({exc})"
            else:
                reason = "command channel closed"
            if not chunk:
                raise GuestCommandError(f"{self.name()}: {reason}; console: "
                                        f"{self.console_tail()!r}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode(errors="replace")

    def run(self, script: str, timeout: float = 60) -> Result:
        """Run ``script`` with the guest's sh; waits at most ``timeout`` seconds."""
        ident = secrets.token_hex(4)
        payload = base64.b64encode(script.encode()).decode()
        self._connect().sendall(f"{ident} {payload}\n".encode())
        deadline = time.monotonic() + timeout
        while self._line(deadline) != f"BEGIN {ident}":
            pass  # an answer to an earlier, abandoned command
        body = []
        while not (line := self._line(deadline)).startswith(f"END {ident} "):
            body.append(line)
        output = base64.b64decode("".join(body)).decode(errors="replace")
        return Result(output, int(line.rsplit(" ", 1)[1]))

    def check(self, script: str, timeout: float = 60) -> str:
        """:meth:`run`, raising unless the exit code is 0; returns the output."""
        res = self.run(script, timeout)
        if res.rc != 0:
            raise GuestCommandError(f"{self.name()}: {script!r} exited {res.rc}: {res.output}")
        return res.output

    def wait_ready(self, timeout: float) -> float:
        """Wait until the guest answers a command; returns the seconds it took."""
        start = time.monotonic()
        self.check("echo ready", timeout=timeout)
        return time.monotonic() - start

    def console_tail(self, size: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class LinuxGuests:
    """Boots test guests on a libvirt connection and removes them all on :meth:`close`."""

    def __init__(self, conn: libvirt.virConnect, image: Path, *, boot_timeout: float = 180,
                 memory_mib: int = 256) -> None:
        self.conn = conn
        self.image = image
        self.boot_timeout = boot_timeout
        self.memory_mib = memory_mib
        self._made: dict[str, LinuxGuest] = {}
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        for old in RUN_DIR.glob(f"{NAME_PREFIX}*.log"):  # consoles kept for a look, a day long
            if time.time() - old.stat().st_mtime > 86400:
                old.unlink(missing_ok=True)

    def start(self, name: str = "g", *, wait: bool = True) -> LinuxGuest:
        """Create a transient guest and (``wait``) wait for its command prompt."""
        full = f"{NAME_PREFIX}{name}-{secrets.token_hex(4)}"
        log = RUN_DIR / f"{full}.log"
        xml = domain_xml(full, self.image, log, self.memory_mib)
        started = time.monotonic()
        self._made[full] = None  # type: ignore[assignment] # recorded before it exists
        dom = self.conn.createXML(xml, 0)
        guest = self._made[full] = LinuxGuest(dom, channel_path(dom), log)
        if wait:
            guest.wait_ready(self.boot_timeout)
            guest.boot_seconds = time.monotonic() - started
        return guest

    def close(self) -> None:
        for full, guest in list(self._made.items()):
            if guest is not None:
                guest.close()
            try:
                ignore_gone(self.conn.lookupByName(full).destroy)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
            del self._made[full]  # the console log stays, for a look after a failure

    def __enter__(self) -> LinuxGuests:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
