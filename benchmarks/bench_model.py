"""Disks per second for building+serializing a complex disk, and for parsing it back.

Run on demand: ``.venv/bin/python benchmarks/bench_model.py``. Compares the model with bare lxml
element building for the same disk shape, measured in the same run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lxml import etree

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import best_rate  # noqa: E402

from virtdriver.config import Address, Alias, BlockIO, Disk, Driver, IoTune, Source, Target


def build_model() -> str:
    return Disk(
        type="block", device="disk",
        driver=Driver(name="qemu", type="raw", cache="none", io="native", discard="unmap"),
        source=Source(dev="/dev/disk/by-path/ip-192.0.2.5:3260-iscsi-iqn.2010-10.org.x:vol-lun-1"),
        blockio=BlockIO(logical_block_size=512, physical_block_size=4096),
        target=Target(dev="sdb", bus="scsi"),
        iotune=IoTune(read_iops_sec=500, write_iops_sec=300, total_bytes_sec_max=None,
                      read_bytes_sec=10485760),
        readonly=True, shareable=True, serial="4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e",
        alias=Alias(name="ua-4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e"),
        address=Address.drive(3),
    ).to_xml()


def build_lxml() -> bytes:
    sub = etree.SubElement
    disk = etree.Element("disk", type="block", device="disk")
    sub(disk, "driver", name="qemu", type="raw", cache="none", io="native", discard="unmap")
    sub(disk, "source",
        dev="/dev/disk/by-path/ip-192.0.2.5:3260-iscsi-iqn.2010-10.org.x:vol-lun-1")
    sub(disk, "blockio", logical_block_size="512", physical_block_size="4096")
    sub(disk, "target", dev="sdb", bus="scsi")
    iotune = sub(disk, "iotune")
    for key, value in (("read_bytes_sec", 10485760), ("read_iops_sec", 500),
                       ("write_iops_sec", 300)):
        sub(iotune, key).text = str(value)
    sub(disk, "readonly")
    sub(disk, "shareable")
    sub(disk, "serial").text = "4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e"
    sub(disk, "alias", name="ua-4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e")
    sub(disk, "address", type="drive", controller="0", bus="0", target="0", unit="3")
    return etree.tostring(disk, pretty_print=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    args = parser.parse_args()
    xml = build_model()
    rows = [
        ("model: build + serialize", best_rate(build_model, args.seconds / 3, 3)),
        ("model: parse (strict)", best_rate(lambda: Disk.from_xml(xml), args.seconds / 3, 3)),
        ("bare lxml: build + serialize", best_rate(build_lxml, args.seconds / 3, 3)),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"{'measurement':<{width}}  {'disks/s':>10}")
    for name, value in rows:
        print(f"{name:<{width}}  {value:>10,.0f}")
    print(f"model build+serialize / bare lxml = {rows[0][1] / rows[2][1]:.2f}x")


if __name__ == "__main__":
    main()
