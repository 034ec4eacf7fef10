"""How a volume's disk arrives on the destination of a live migration.

The destination renders each volume's ``<disk>`` anew from its own ``connection_info``: the
source (device path, hosts, secrets) is that host's. Everything else the guest was promised must
arrive as it left, in one of two ways:

- **carried over** from the leaving disk, whatever the destination would render
  (:data:`CARRIED`): where the guest sees the disk (target, address, alias, boot order), its
  encryption, and how QEMU opens it (the ``<driver>`` element: cache and io, error policies,
  iothread, queues, detect_zeroes, copy_on_read). These were chosen when the disk was attached,
  under the attach policy; the sharing rules check a shared disk's cache again before it may leave
  (:func:`virtdriver.policy.migration.refuse_leaving`).
- **must agree** (:data:`PROMISES`): what the volume itself promises, as the destination's
  ``connection_info`` renders it. A difference refuses the migration before anything moves,
  naming the field and where the destination's value came from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any, Final

from virtdriver.config import Disk
from virtdriver.errors import MigrationRefused

CARRIED: Final = ("target", "address", "alias", "boot", "encryption",
                  "driver (cache, io, error policies, iothread, queues, detect_zeroes, "
                  "copy_on_read)")


def _driver(name: str) -> Callable[[Disk], Any]:
    return lambda d: getattr(d.driver, name) if d.driver is not None else None


def _fields(element: Any) -> tuple[tuple[str, Any], ...] | None:
    """An element's declared values (its undeclared parts left out), for comparison."""
    if element is None:
        return None
    return tuple((f.name, getattr(element, f.name)) for f in fields(element)
                 if f.name != "unknown" and getattr(element, f.name) is not None)


def _labels(disk: Disk) -> tuple[str, ...]:
    labels = disk.source.seclabels if disk.source is not None else []
    return tuple(sorted(f"{s.model or 'default'}:{s.label or 'relabel=' + (s.relabel or 'yes')}"
                        for s in labels))


#: field -> (its value in a disk, where the destination's value comes from)
PROMISES: Final[dict[str, tuple[Callable[[Disk], Any], str]]] = {
    "shareable": (lambda d: d.shareable,
                  "connection_info.multiattach for the destination (Cinder's "
                  "initialize_connection leaves it out; the compute service must set it)"),
    "readonly": (lambda d: d.readonly, "the attach mode prepared on the destination, or "
                                       "connection_info.data.access_mode"),
    "format": (_driver("type"), "the volume's format in connection_info.data"),
    "discard": (_driver("discard"), "connection_info.data.discard"),
    "iotune": (lambda d: _fields(d.iotune), "connection_info.data.qos_specs"),
    "blockio": (lambda d: _fields(d.blockio),
                "connection_info.data.logical_block_size and physical_block_size"),
    "serial": (lambda d: d.serial, "connection_info.serial"),
    "wwn": (lambda d: d.wwn, "not set by virtdriver"),
    "vendor": (lambda d: d.vendor, "not set by virtdriver"),
    "product": (lambda d: d.product, "not set by virtdriver"),
    "device": (lambda d: d.device or "disk", "the leaving disk's device"),
    "sgio": (lambda d: d.sgio, "not set by virtdriver"),
    "rawio": (lambda d: d.rawio, "not set by virtdriver"),
    "transient": (lambda d: d.transient, "not set by virtdriver"),
    "labels": (_labels, "the destination's label policy (--label-policy)"),
}


def carried_over(leaving: Disk, rendered: Disk) -> Disk:
    """The disk as it arrives: ``rendered`` (the destination's) with :data:`CARRIED` taken from
    ``leaving``. The driver keeps the destination's format and discard (promises: compared)."""
    driver = rendered.driver
    if leaving.driver is not None:
        driver = replace(
            leaving.driver, name=rendered.driver.name if rendered.driver else leaving.driver.name,
            type=rendered.driver.type if rendered.driver else None,
            discard=rendered.driver.discard if rendered.driver else None)
    return replace(rendered, target=leaving.target or rendered.target,
                               address=leaving.address, alias=leaving.alias or rendered.alias,
                               boot=leaving.boot, encryption=leaving.encryption, driver=driver)


def broken_promises(leaving: Disk, arriving: Disk) -> list[str]:
    """The :data:`PROMISES` fields in which ``arriving`` differs from ``leaving``."""
    return [name for name, (value, _) in PROMISES.items() if value(leaving) != value(arriving)]


def refuse_changed(guest: str, volume: str, leaving: Disk, arriving: Disk) -> None:
    """Refuse the migration when the disk would not arrive as it left, naming the fields."""
    broken = broken_promises(leaving, arriving)
    if not broken:
        return
    first = broken[0]
    value, source = PROMISES[first]
    device = leaving.target.dev if leaving.target is not None else "?"
    more = f" (also: {', '.join(broken[1:])})" if broken[1:] else ""
    raise MigrationRefused(
        f"guest {guest} cannot be migrated: its disk {device} (volume {volume}) would arrive "
        f"with {first}={_shown(value(arriving))} but leaves with {first}="
        f"{_shown(value(leaving))}{more}; the destination's value comes from {source}; "
        "nothing was moved")


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return "{" + ", ".join(f"{item[0]}={item[1]}" if isinstance(item, tuple) else str(item)
                               for item in value) + "}"
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value)
