"""The test guest's initramfs writer, read back by a newc reader of the test's own (no host)."""

from __future__ import annotations

import gzip

from testhosts.linuxguest.initramfs import cpio_gz


def read_newc(archive: bytes) -> dict[str, tuple[int, bytes]]:
    data, pos, entries = gzip.decompress(archive), 0, {}
    while True:
        assert data[pos:pos + 6] == b"070701"
        fields = [int(data[pos + 6 + 8 * i:pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name_at = pos + 110
        name = data[name_at:name_at + namesize - 1].decode()
        body_at = name_at + namesize + (-(110 + namesize) % 4)
        if name == "TRAILER!!!":
            return entries
        entries[name] = (mode, data[body_at:body_at + size])
        pos = body_at + size + (-size % 4)


def test_files_come_back_with_their_modes_and_parent_directories() -> None:
    files = {"init": (0o100755, b"#!/bin/busybox sh\n"),
             "lib/modules/a.ko": (0o100644, b"x" * 5),
             "lib64/ld.so": (0o120777, b"../lib/ld")}
    back = read_newc(cpio_gz(files))
    assert {k: v for k, v in back.items() if k in files} == files
    assert back["lib"][0] == back["lib/modules"][0] == back["lib64"][0] == 0o040755
    assert set(back) == set(files) | {"lib", "lib/modules", "lib64"}


def test_a_module_built_into_the_kernel_is_not_loaded(tmp_path) -> None:
    """Debian 13's kernel builds virtio_pci in: it is listed in modules.builtin, no .ko."""
    from testhosts.linuxguest.initramfs import builtin_modules, load_order

    (tmp_path / "modules.builtin").write_text("kernel/drivers/virtio/virtio_pci.ko\n"
                                              "kernel/drivers/scsi/sd_mod.ko\n")
    builtin = builtin_modules(tmp_path)
    assert builtin == {"virtio_pci", "sd_mod"}
    assert load_order({}, ["virtio_pci", "sd_mod"], builtin) == []
