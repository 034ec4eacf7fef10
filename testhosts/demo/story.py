"""A two-minute story on real guests: one multiattach volume, two KVM guests, no OS needed.

    python -m testhosts.demo            # through qemu:///embed (no daemon), else qemu:///system
    python -m testhosts.demo --uri qemu:///system
    python -m testhosts.demo --guest-view   # two small Linux guests, and lines from inside

Two OS-less guests are started; a loop device over a sparse file becomes a multiattach volume,
attached read-write to the first and read-only to the second through
:class:`~virtdriver.driver.LibvirtVolumeDriver`. The first guest's QEMU writes a pattern
(``qemu-io`` through the monitor, i.e. through the guest's own block backend), the second reads
it, its own write is refused, a detach leaves the other attachment working, and the last detach
releases the host connection. Everything made is removed again, on failure and Ctrl-C too.
With ``--guest-view`` the guests are the project's small Linux test guest and each step adds
what the guests' own kernels say (:mod:`testhosts.demo.view`; some 20 s more).

The embedded driver takes over every ``qemu:///`` URI of its process: run this in a process of its
own (a subprocess in tests), never inside another libvirt user.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

# The embedded driver logs to stderr (taints, "security driver none", probes that fail harmlessly);
# what matters reaches us as exceptions.
# libvirt reads this when it initialises, i.e. on import.
os.environ.setdefault("LIBVIRT_LOG_OUTPUTS", "4:file:/dev/null")

import libvirt  # noqa: E402

from testhosts.guests import (  # noqa: E402
    EMBED_QEMU_CONF,
    SYSTEM_URI,
    Guests,
    LoopDevice,
    LoopDeviceError,
    QemuIoError,
    ReadOnlyWrite,
    ensure_event_loop,
    prepare_embed_root,
    read_pattern,
    write_pattern,
)
from virtdriver.errors import VirtDriverError, VolumeInUse  # noqa: E402

VOLUME_BYTES = 32 * 1024 * 1024
PATTERN = 0x5A


class DemoFailed(Exception):
    """Something did not behave as the story says it should."""


# ---- guests -------------------------------------------------------------------------------------


class Workspace:
    """Everything the demo makes, removed again by :meth:`clean` (each part at most once)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="vddemo-", dir="/tmp"))  # short: socket paths
        self.conn: libvirt.virConnect | None = None
        self.guests: Guests | None = None
        self.loop: LoopDevice | None = None
        self.closers: list[Callable[[], None]] = []
        self.view: Any = None  # demo_view.LinuxPair with --guest-view

    def open(self, uri: str | None) -> str:
        """Open ``uri``, or by default an embedded driver under the workspace (else system)."""
        ensure_event_loop()  # before any open: events, and embed refuses to open without it
        if uri is None:
            # QEMU as root (so it can open /dev/kvm), a seeded capabilities cache (the first
            # guest then starts in a fraction of a second); no ownership notes in xattrs: every
            # file is the demo's own, and libvirt's DAC driver, relabelling the kernel both Linux
            # guests of --guest-view share, warned on stderr about the first guest's note
            embed = prepare_embed_root(self.dir / "r", seed=True,
                                       qemu_conf=EMBED_QEMU_CONF + "remember_owner = 0\n")
            try:
                self.conn = libvirt.open(embed)
            except libvirt.libvirtError:
                uri = SYSTEM_URI
            else:
                uri = embed
        if self.conn is None:
            self.conn = libvirt.open(uri)
        # Our own embedded driver has no other users; the system host is shared: unique names.
        self.guests = Guests(self.conn, prefix="", unique=not uri.startswith("qemu:///embed"),
                             memory_mib=128)
        return uri

    @property
    def kvm(self) -> bool:
        return self.guests is not None and self.guests.kvm

    def start_guest(self, name: str) -> libvirt.virDomain:
        assert self.guests is not None
        return self.guests.start(name, persistent=False)  # transient: destroyed is gone

    def start_linux_guests(self, *names: str) -> list[libvirt.virDomain]:
        from testhosts.demo import view as demo_view

        root = demo_view.image()
        assert self.conn is not None
        self.view = demo_view.LinuxPair(self.conn, demo_view.private_copy(root, self.dir))
        self.closers.append(self.view.close)
        return self.view.start(*names)

    def loop_over_sparse_file(self, size: int) -> str:
        self.loop = LoopDevice(size, directory=self.dir)
        return self.loop.attach()

    def clean(self) -> list[str]:
        """Remove guests, the loop device and the temp dir; returns what could not be removed."""
        problems = []
        for close in reversed(self.closers):
            with contextlib.suppress(Exception):
                close()
        self.closers.clear()
        if self.guests is not None:
            problems += [f"guest {name}: {exc}" for name, exc in self.guests.remove_all()]
        if self.loop is not None:
            try:
                self.loop.detach()
            except LoopDeviceError as exc:
                problems.append(str(exc))
            self.loop = None
        if self.conn is not None:
            with contextlib.suppress(libvirt.libvirtError):
                self.conn.close()
            self.conn = None
        shutil.rmtree(self.dir, ignore_errors=True)
        return problems


# ---- the story ----------------------------------------------------------------------------------


class Story:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.step = 0

    def say(self, text: str) -> None:
        _stop_if_interrupted()
        print(text, flush=True)

    def next(self, text: str) -> None:
        self.step += 1
        self.say(f"\n{self.step}. {text}")

    def result(self, text: str) -> None:
        self.say(f"   -> {text}")

    def expect(self, ok: bool, text: str) -> None:
        if not ok:
            raise DemoFailed(text)


ATTACHMENT_COLUMNS = [("server_name", "Guest"), ("device", "Device"), ("attach_mode", "Mode"),
                      ("shareable", "Shareable"), ("cache", "Cache"), ("source", "Source")]


def attachments_table(driver: Any, guests: Sequence[str]) -> list[str]:
    from virtdriver.formatting import table_lines

    rows = [a.to_api() | {"shareable": "yes" if a.shareable else "no"}
            for g in guests for a in driver.list_attachments(g)]
    return table_lines(rows, ATTACHMENT_COLUMNS) if rows else ["(no attachments)"]


def inside(story: Story, ws: Workspace, dom: libvirt.virDomain, command: str) -> None:
    """With the guest view: ``command`` run in the guest, and the line it printed."""
    if ws.view is not None:
        story.say(f"      [inside {dom.name()}] $ {command}\n"
                  f"      [inside {dom.name()}]   {ws.view.say(dom, command)}")


def run(story: Story, ws: Workspace, uri: str | None, guest_view: bool = False) -> None:
    from virtdriver.driver import LibvirtVolumeDriver

    uri = ws.open(uri)
    embedded = uri.startswith("qemu:///embed")
    story.say(f"virtdriver demo: one multiattach volume shared by two running guests\n"
              f"   libvirt: {'qemu:///embed (in this process, no daemon)' if embedded else uri}")

    if guest_view:
        story.next("Start two small Linux guests (Debian's kernel and busybox, TCG)")
        a, b = ws.start_linux_guests("guest-a", "guest-b")
        story.result(f"{a.name()} and {b.name()} running; each answers commands on a "
                     "virtio-serial port")
        for dom in (a, b):
            inside(story, ws, dom, "uname -sr")
    else:
        story.next("Start two guests with no OS, a virtio-scsi controller each")
        a, b = ws.start_guest("guest-a"), ws.start_guest("guest-b")
        story.result(f"{a.name()} and {b.name()} running "
                     f"({'KVM' if ws.kvm else 'TCG emulation: no usable KVM'})")

    device = ws.loop_over_sparse_file(VOLUME_BYTES)
    vid = str(uuid.uuid4())
    alias = f"ua-{vid}"
    info: dict[str, Any] = {"driver_volume_type": "local", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "device_path": device, "access_mode": "rw"}}
    story.next(f"Attach volume {vid[:8]} ({device}, a {VOLUME_BYTES >> 20} MiB loop device, "
               "multiattach) to both")

    driver = LibvirtVolumeDriver(uri, state_dir=ws.dir / "state", detach_timeout=15)
    ws.closers.append(driver.close)
    att_a = driver.attach_volume(info, a.name(), attach_mode="rw")
    story.result(f"attached read-write to {a.name()} as {att_a.device}")
    att_b = driver.attach_volume(info, b.name(), attach_mode="ro")
    story.result(f"attached read-only to {b.name()} as {att_b.device}")
    story.expect(att_a.shareable and att_b.shareable and att_b.attach_mode == "ro",
                 "both attachments should be shareable, the second read-only")
    story.say("")
    for line in attachments_table(driver, [a.name(), b.name()]):
        story.say(f"   {line}")
    disks = {}
    if ws.view is not None:
        story.say("")
        for dom in (a, b):
            disks[dom.name()] = ws.view.disk(dom, vid)
            inside(story, ws, dom, f"echo {disks[dom.name()]}: read-only "
                                   f"$(blockdev --getro /dev/{disks[dom.name()]}),"
                                   f" $(blockdev --getsize64 /dev/{disks[dom.name()]}) bytes")

    story.next(f"{a.name()} writes 4 KiB of {PATTERN:#04x} through its own disk")
    out = write_pattern(a, alias, PATTERN)
    story.result(out.splitlines()[0])
    story.expect(read_pattern(b, alias, PATTERN), f"{b.name()} did not see the data")
    story.result(f"{b.name()} reads the same bytes back: pattern {PATTERN:#04x} verified")
    if disks:
        inside(story, ws, b, f"dd if=/dev/{disks[b.name()]} bs=4096 count=1 iflag=direct "
                             "2>/dev/null | od -An -tx1 | head -n1")

    story.next(f"{b.name()} tries to write to its read-only attachment")
    try:
        out = write_pattern(b, alias, 0x01)
    except ReadOnlyWrite as refused:
        story.result(f"refused by QEMU: {refused.output.splitlines()[0]}")
    else:
        story.expect(False, f"the read-only write was not refused: {out!r}")
    if disks:
        inside(story, ws, b, f"dd if=/dev/zero of=/dev/{disks[b.name()]} bs=4096 count=1 "
                             "oflag=direct")

    story.next(f"{b.name()} asks for the same device as another volume that is not multiattach")
    other = str(uuid.uuid4())
    try:
        driver.attach_volume({**info, "serial": other, "multiattach": False,
                              "data": {**info["data"], "volume_id": other}}, b.name())
    except VolumeInUse as exc:
        story.result(f"refused: {' '.join(str(exc).split())}")
    else:
        raise DemoFailed("the same data under a second, unshared volume was attached")

    story.next(f"Detach from {a.name()}")
    driver.detach_volume(a.name(), vid)
    story.expect(driver.records.connected() == [vid], "the host connection should be kept")
    story.result(f"host connection kept: {b.name()} still uses the volume")
    story.expect(read_pattern(b, alias, PATTERN), f"{b.name()} lost the data")
    story.result(f"{b.name()} still reads {PATTERN:#04x}")
    if disks:
        inside(story, ws, a, f"n=0; while [ -e /sys/block/{disks[a.name()]} ] && [ $n -lt 150 ];"
                             " do sleep 0.2; n=$((n+1)); done; echo disks: $(ls /sys/block)")

    story.next(f"Detach from {b.name()}, the last user on this host")
    driver.detach_volume(b.name(), vid)
    story.expect(driver.records.connected() == [], "the host connection should be released")
    story.result("host connection released (os-brick disconnect)")


INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# A signal handler's exception can land inside a garbage-collector or weakref callback, where
# Python prints and drops it; remembering the signal lets the next step of the story stop anyway.
_signals_seen: list[int] = []


def _interrupted(signum: int, frame: FrameType | None) -> None:
    _signals_seen.append(signum)
    raise KeyboardInterrupt


def _stop_if_interrupted() -> None:
    if _signals_seen:
        raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testhosts.demo",
        description="Share one volume between two running guests, read-write and read-only.")
    parser.add_argument("--uri", help="libvirt URI (default: qemu:///embed in a temporary root, "
                                      "else qemu:///system)")
    parser.add_argument("--guest-view", action="store_true",
                        help="run the story on two small Linux guests (the project's test "
                             "guest, built on first use, TCG: some 20 s more) and show lines "
                             "from inside them")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    if os.geteuid() != 0:
        print("demo: error: needs root (loop devices, QEMU with /dev/kvm)", file=sys.stderr)
        return 1
    for sig in INTERRUPTS:  # Ctrl-C, kill and a closed terminal all end in the cleanup below
        signal.signal(sig, _interrupted)
    story = Story()
    ws = Workspace()
    status = 0
    try:
        run(story, ws, args.uri, args.guest_view)
        _stop_if_interrupted()
    except KeyboardInterrupt:
        print("\ndemo: interrupted", file=sys.stderr)
        status = 130
    except (DemoFailed, QemuIoError, LoopDeviceError, VirtDriverError, libvirt.libvirtError,
            subprocess.CalledProcessError, OSError, RuntimeError) as exc:
        print(f"\ndemo: error: {' '.join(str(exc).split())}", file=sys.stderr)
        status = 1
    finally:
        for sig in INTERRUPTS:
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not stop the cleanup
        problems = ws.clean()
    for problem in problems:
        print(f"demo: could not clean up {problem}", file=sys.stderr)
    if status == 0:
        print(f"\nCleaned up guests, loop device and temporary files. "
              f"Done in {time.monotonic() - story.started:.1f} s.")
    return status or (1 if problems else 0)


if __name__ == "__main__":
    sys.exit(main())
