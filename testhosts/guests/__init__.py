"""OS-less guests for the demo, the tests and the benchmarks: the one home of these helpers.

A test host, not the product: the wheel does not install it (a source checkout has it).

* :mod:`.domain`: guest XML, connections with an event loop, :class:`Guests` (start uniquely
  named guests, KVM with a TCG fallback, remove them all in parallel);
* :mod:`.embed`: roots for the in-process driver ``qemu:///embed`` (QEMU as root, a seeded
  capabilities cache, one root per process);
* :mod:`.events`: waiting for DEVICE_REMOVED after a detach;
* :mod:`.loop`: sparse files and loop devices over them;
* :mod:`.monitor`: qemu-io and ``query-block`` through QEMU's monitor: what the guest sees.

Nothing here mocks libvirt: every helper talks to a real libvirtd or to the embedded driver.
pytest fixtures built on these live in ``tests/support/``.
"""

from testhosts.guests.domain import (
    KVM_FAILURE_MARKERS,
    NAME_PREFIX,
    SYSTEM_SOCKETS,
    SYSTEM_URI,
    Guests,
    ensure_event_loop,
    guest_xml,
    ignore_gone,
    open_connection,
    quiet_libvirt_errors,
    system_daemon,
)
from testhosts.guests.embed import (
    EMBED_CAPS_SEEDS,
    EMBED_QEMU_CONF,
    embed_root_of,
    embed_uri,
    prepare_embed_root,
    process_embed_root,
    save_capabilities,
    seed_capabilities,
)
from testhosts.guests.events import DeviceEvents, detach_and_wait
from testhosts.guests.loop import LoopDevice, LoopDeviceError, loop_devices_of, sparse_file
from testhosts.guests.monitor import (
    BlockInfo,
    QemuIoError,
    ReadOnlyWrite,
    block_info,
    domain_log_path,
    qemu_io,
    query_block,
    read_pattern,
    write_pattern,
)
from virtdriver.hypervisor.capabilities import kvm_available

__all__ = [
    "BlockInfo", "DeviceEvents", "EMBED_CAPS_SEEDS", "EMBED_QEMU_CONF", "Guests",
    "KVM_FAILURE_MARKERS", "LoopDevice", "LoopDeviceError", "NAME_PREFIX", "QemuIoError",
    "ReadOnlyWrite", "SYSTEM_SOCKETS", "SYSTEM_URI", "block_info", "detach_and_wait",
    "domain_log_path", "embed_root_of", "embed_uri", "ensure_event_loop", "guest_xml",
    "ignore_gone", "kvm_available", "loop_devices_of", "open_connection", "prepare_embed_root",
    "process_embed_root", "qemu_io", "query_block", "quiet_libvirt_errors", "read_pattern",
    "save_capabilities", "seed_capabilities", "sparse_file", "system_daemon", "write_pattern",
]
