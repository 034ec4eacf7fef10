"""Attach and detach latency of nova 34's own libvirt driver, with N running guests on the host.

    /var/tmp/virtdriver-nova-34.0.0/bin/python benchmarks/bench_nova_attach.py \
        [--rounds 30] [--guests 1 32 96]

Runs in the venv ``scripts/nova-suite.sh`` builds (``$NOVA_SUITE_VENV``, by default
``/var/tmp/virtdriver-nova-34.0.0``), this checkout first on ``sys.path``. nova is set up as
``tests/nova/test_nova_guests.py``'s ``nova_env`` sets it up (its configuration on
qemu:///system, its objects, the in-memory SQLite of nova's ``Database`` fixture, an
``Instance`` per guest) and driven as that test drives it, with nova's own
``nova.virt.libvirt.driver.LibvirtDriver(FakeVirtAPI(), False)`` and ``_host.initialize()``:
``attach_volume(ctx, info, instance, "/dev/sdb", disk_bus="scsi", device_type="disk")`` and
``detach_volume(ctx, info, instance, "/dev/sdb")``, which waits for DEVICE_REMOVED. nova runs
in native threads, as ``nova-compute`` 34 starts (``monkey_patch.patch(backend='threading')``);
the test runs under eventlet only because nova's test fixtures patch it on import, which would
add eventlet's thread-pool hop to each of nova's libvirt calls.

Why it is fair: the volume is bench_attach.py's, the same ``connection_info`` on a raw file
(``timing.file_volume``: type ``gpfs``, multiattach), and nova's own table maps ``gpfs`` to
``LibvirtGPFSVolumeDriver``: a ``<disk type='file'>`` whose connect and disconnect do nothing,
so neither side pays os-brick or a mount, only its own work around libvirt (nova's ``local``
is the same for a block device). The guests are bench_attach's (``timing.AttachHost``: OS-less,
64 MiB, each with a volume of its own, attached here by nova), and the measured disk lands where
virtdriver's does (``sdb``, SCSI unit 1). Where nova's path leaves the host, nova gets the answer
for free, so its figures are a lower bound of nova's real path: the block-storage service's
``volume_api.get`` its detach of a multiattach volume makes (the volume's other attachments) is
answered from memory (one attachment: nova releases the host side, a no-op for gpfs), and its
database is an in-memory SQLite, not a conductor over RPC.

Raw: ``attachDeviceFlags`` of the ``<disk>`` nova renders (live and persistent), then
``detachDeviceFlags`` and the wait for DEVICE_REMOVED. The sides alternate round by round, each
going first equally often; medians are reported. Prints one JSON line with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import libvirt

ROOT = Path(__file__).resolve().parent.parent
# testhosts/ is not installed, and this checkout's virtdriver comes before the venv's wheel
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from timing import AttachHost, LibvirtCalls, file_volume, round_trips, timed  # noqa: E402

from testhosts.guests import DeviceEvents, Guests, detach_and_wait  # noqa: E402

FLAGS = libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG
NOVA_VERSION = os.environ.get("NOVA_VERSION", "34.0.0")


def nova_python() -> tuple[Path | None, str]:
    """The python of scripts/nova-suite.sh's venv, or ``None`` and why it is missing."""
    venv = Path(os.environ.get("NOVA_SUITE_VENV", f"/var/tmp/virtdriver-nova-{NOVA_VERSION}"))
    python = venv / "bin" / "python"
    if not python.exists():
        return None, f"no nova venv at {venv} (scripts/nova-suite.sh builds it)"
    if not (venv / ".virtdriver-nova-suite").exists():
        return None, f"{venv} is not complete (scripts/nova-suite.sh finishes it)"
    return python, ""


class OneAttachmentCinder:
    """The block-storage service's answer for a volume with one attachment, from memory."""

    def get(self, context: Any, volume_id: str) -> dict[str, Any]:
        return {"id": volume_id, "multiattach": True, "attachments": {"one-server": {}}}


class NovaCompute:
    """nova's LibvirtDriver behind the calls :class:`timing.AttachHost` makes of a driver."""

    def __init__(self, lock_dir: Path) -> None:
        import nova.conf
        from nova import config, objects
        from nova import context as nova_context
        from nova.tests import fixtures as nova_fixtures
        from nova.virt import fake
        from nova.virt.libvirt import driver

        # As tests/nova/test_nova_guests.py's nova_env fixture.
        conf = nova.conf.CONF
        config.parse_args([], configure_db=False, init_rpc=False)
        objects.register_all()
        conf.set_override("virt_type", "kvm" if os.path.exists("/dev/kvm") else "qemu",
                          group="libvirt")
        conf.set_override("connection_uri", "qemu:///system", group="libvirt")
        conf.set_override("lock_path", str(lock_dir), group="oslo_concurrency")
        conf.set_override("connection", "sqlite://", group="database")
        self.database = nova_fixtures.Database(database="main")
        self.database.setUp()
        self.ctx = nova_context.get_admin_context()
        self.driver = driver.LibvirtDriver(fake.FakeVirtAPI(), False)
        self.driver._host.initialize()
        self.driver._volume_api = OneAttachmentCinder()
        self.conn = self.driver._host.get_connection()
        self.instances: dict[str, Any] = {}  # domain name -> nova Instance
        self.devices: dict[str, dict[str, str]] = {}  # domain name -> volume id -> /dev/sdX
        self.infos: dict[str, dict] = {}  # volume id -> connection_info
        self._lock = threading.Lock()  # guests start four at a time; nova's SQLite is one

    def instance(self, name: str) -> Any:
        """The nova ``Instance`` of domain ``name``, created on first use."""
        from nova import objects

        if name not in self.instances:
            inst = objects.Instance(context=self.ctx, host="vdbench-host", project_id="p",
                                    uuid=self.conn.lookupByName(name).UUIDString(),
                                    user_id="u", image_ref="", system_metadata={},
                                    vm_state="active", power_state=1)
            inst.create()
            self.instances[name] = inst
        return self.instances[name]

    def attach_volume(self, info: dict, name: str) -> None:
        """nova's attach of ``info`` to guest ``name``, at its first free SCSI device."""
        with self._lock:
            used = self.devices.setdefault(name, {})
            dev = next(f"/dev/sd{c}" for c in "abcdefgh" if f"/dev/sd{c}" not in used.values())
            self.driver.attach_volume(self.ctx, info, self.instance(name), dev,
                                      disk_bus="scsi", device_type="disk")
            used[info["data"]["volume_id"]] = dev
            self.infos[info["data"]["volume_id"]] = info

    def detach_volume(self, name: str, volume_id: str) -> None:
        """nova's detach of ``volume_id`` from guest ``name``, DEVICE_REMOVED waited for."""
        with self._lock:
            dev = self.devices[name].pop(volume_id)
            self.driver.detach_volume(self.ctx, self.infos.pop(volume_id), self.instance(name),
                                      dev)


def measure(nova: NovaCompute, events: DeviceEvents, dom: Any, image: Path, rounds: int,
            settle: float) -> dict[str, float]:
    """Median milliseconds of raw and nova, ``rounds`` alternating rounds on ``dom`` (and nova's
    own CPU per attach and detach, ``*_cpu``)."""
    driver, ctx, inst = nova.driver, nova.ctx, nova.instance(dom.name())
    times: dict[str, list[float]] = {k: [] for k in ("raw_attach", "raw_detach", "nova_attach",
                                                     "nova_detach", "nova_attach_cpu",
                                                     "nova_detach_cpu")}

    def take(name: str, call: Any, *args: Any, **kwargs: Any) -> None:
        wall, cpu = timed(lambda: call(*args, **kwargs), settle=settle)
        times[name].append(wall)
        if name + "_cpu" in times:
            times[name + "_cpu"].append(cpu)

    def raw(info: dict) -> None:
        # The disk nova renders for this guest: its second disk, sdb on unit 1.
        disk = driver._get_volume_config(info, {"bus": "scsi", "dev": "sdb", "type": "disk",
                                                "unit": 1})
        xml, alias = disk.to_xml(), f"ua-{info['data']['volume_id']}"
        take("raw_attach", dom.attachDeviceFlags, xml, FLAGS)
        take("raw_detach", detach_and_wait, events, dom, xml, alias, timeout=60, flags=FLAGS)

    def theirs(info: dict) -> None:
        take("nova_attach", driver.attach_volume, ctx, info, inst, "/dev/sdb", disk_bus="scsi",
             device_type="disk")
        take("nova_detach", driver.detach_volume, ctx, info, inst, "/dev/sdb")
        events.clear()  # nova waited for its own DEVICE_REMOVED

    sides = [raw, theirs]
    for n in range(rounds):
        for side in sides[n % 2:] + sides[:n % 2]:
            side(file_volume(image))
    return {k: statistics.median(v) * 1000 for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--guests", type=int, nargs="+", default=[1],
                        help="running guests on the host (several: measured in turn, the host "
                             "growing from one count to the next)")
    parser.add_argument("--settle", type=float, default=0.05,
                        help="seconds of quiet before each timed call, as bench_attach.py")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from importlib.metadata import version

    os.environ["OS_NOVA_DISABLE_EVENTLET_PATCHING"] = "1"  # before nova's fixtures patch it
    from nova import monkey_patch

    monkey_patch.patch(backend="threading")  # as nova/cmd/compute.py starts nova-compute
    logging.getLogger("nova").setLevel(logging.ERROR)  # raw detaches: "event ... ignored"
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        nova = NovaCompute(Path(tmp) / "locks")
        # The guests and the raw side on a connection of their own (nova's holds nova's
        # DEVICE_REMOVED callback), opened once nova's event loop runs.
        conn = libvirt.open("qemu:///system")
        try:
            with Guests(conn, memory_mib=64) as guests, DeviceEvents(conn) as events:
                host = AttachHost(conn, guests, nova, Path(tmp), "novabench")
                for count in sorted(set(args.guests)):
                    dom = host.grow(count)
                    events.clear()
                    med = measure(nova, events, dom, host.image, args.rounds, args.settle)
                    counted = file_volume(host.image)
                    with LibvirtCalls().installed() as calls:  # one untimed run
                        trips = {"attach": round_trips(calls.count(
                                     lambda counted=counted, dom=dom: nova.attach_volume(
                                         counted, dom.name()))),
                                 "detach": round_trips(calls.count(
                                     lambda counted=counted, dom=dom: nova.detach_volume(
                                         dom.name(), counted["data"]["volume_id"])))}
                    events.clear()
                    rows.append({
                        "guests": count, "domains": len(conn.listAllDomains()),
                        **{f"{k}_ms": round(v, 2) for k, v in med.items()},
                        "nova_attach_ratio": round(med["nova_attach"] / med["raw_attach"], 3),
                        "nova_detach_ratio": round(med["nova_detach"] / med["raw_detach"], 3),
                        "nova_attach_round_trips": trips["attach"],
                        "nova_detach_round_trips": trips["detach"],
                        "rounds": args.rounds, "nova_version": version("nova"),
                        "concurrency": "eventlet" if monkey_patch.is_patched()
                        else "threading"})
        finally:
            conn.close()
            nova.database.cleanUp()
    if args.json:
        print(json.dumps(rows if len(rows) > 1 else rows[0]))
        return
    for row in rows:
        print(f"{row['guests']} guest(s) ({row['domains']} domains on the host), nova "
              f"{row['nova_version']}, medians of {args.rounds} alternating rounds:")
        print(f"  {'':<10}{'raw (ms)':>10}{'nova (ms)':>11}{'ratio':>8}{'calls':>7}")
        for op in ("attach", "detach"):
            print(f"  {op:<10}{row['raw_' + op + '_ms']:>10.1f}{row['nova_' + op + '_ms']:>11.1f}"
                  f"{row['nova_' + op + '_ratio']:>8.2f}{row['nova_' + op + '_round_trips']:>7}")
        print(f"  nova's own CPU (median): attach {row['nova_attach_cpu_ms']:.2f} ms, "
              f"detach {row['nova_detach_cpu_ms']:.2f} ms")
    print(f"(whole run: {time.monotonic() - started:.0f} s)")


def run() -> int:
    """:func:`main`'s exit status, its error printed."""
    try:
        main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    status = run()
    sys.stdout.flush()
    sys.stderr.flush()
    # nova's connection-event thread never ends (Host.cleanup's TODO), and exiting joins it.
    os._exit(status)
