"""The pieces of an initramfs: a newc cpio writer and kernel-module dependencies.

Debian's kernel package carries no ``modules.dep`` (``depmod`` writes it at install time, and
this host has no kmod): each module's ``depends=`` is read from its ELF ``.modinfo`` section.
"""

from __future__ import annotations

import gzip
import io
import lzma
import struct
from collections.abc import Iterable
from pathlib import Path


def modinfo(path: Path) -> dict[str, str]:
    """The ``key=value`` strings of a ``.ko``'s ``.modinfo`` section (ELF64 little-endian)."""
    data = module_bytes(path)
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError(f"{path}: not an ELF64 module (compressed?)")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(i: int) -> tuple[int, int, int]:
        name, _t, _f, _a, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, off, size

    _n, stroff, _s = section(shstrndx)
    for i in range(shnum):
        name, off, size = section(i)
        if data[stroff + name:data.index(b"\0", stroff + name)] == b".modinfo":
            pairs = (s.split(b"=", 1) for s in data[off:off + size].split(b"\0") if b"=" in s)
            return {k.decode(): v.decode(errors="replace") for k, v in pairs}
    return {}


def module_index(modules_dir: Path) -> dict[str, Path]:
    """Module name (``-`` read as ``_``) -> its ``.ko`` or ``.ko.xz`` under ``modules_dir``."""
    return {p.name.split(".ko")[0].replace("-", "_"): p
            for pattern in ("*.ko", "*.ko.xz") for p in modules_dir.rglob(pattern)}


def module_bytes(path: Path) -> bytes:
    """A module's ELF bytes: Debian 13 ships modules xz-compressed, the guest loads plain ones."""
    data = path.read_bytes()
    return lzma.decompress(data) if path.name.endswith(".xz") else data


def builtin_modules(modules_dir: Path) -> frozenset[str]:
    """The modules built into the kernel (``modules.builtin``): nothing to load for them."""
    listed = modules_dir / "modules.builtin"
    lines = listed.read_text().split() if listed.exists() else []
    return frozenset(Path(line).name.removesuffix(".ko").replace("-", "_") for line in lines)


def load_order(index: dict[str, Path], wanted: Iterable[str],
               builtin: frozenset[str] = frozenset()) -> list[str]:
    """``wanted`` and everything they depend on, each after its dependencies; built-in ones
    (Debian 13's kernel builds virtio_pci in) are left out."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        name = name.replace("-", "_")
        if name in order or name in builtin:
            return
        if name in path:
            raise ValueError(f"module dependency cycle: {' -> '.join(path + (name,))}")
        if name not in index:
            raise KeyError(f"module {name} is not in the kernel package")
        for dep in filter(None, modinfo(index[name]).get("depends", "").split(",")):
            visit(dep, path + (name,))
        order.append(name)

    for each in wanted:
        visit(each, ())
    return order


def _entry(out: io.BytesIO, ino: int, name: str, mode: int, body: bytes = b"") -> None:
    encoded = name.encode() + b"\0"
    fields = (ino, mode, 0, 0, 1, 0, len(body), 0, 0, 0, 0, len(encoded), 0)
    out.write(b"070701" + b"".join(b"%08X" % f for f in fields) + encoded)
    out.write(b"\0" * (-(110 + len(encoded)) % 4))
    out.write(body + b"\0" * (-len(body) % 4))


def cpio_gz(files: dict[str, tuple[int, bytes]]) -> bytes:
    """A gzip'd newc archive of ``{path: (mode, content)}``; parent directories are added.

    A mode with the symlink bit stores ``content`` as the link target.
    """
    dirs = {"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)}
    out = io.BytesIO()
    ino = 1
    for d in sorted(dirs - set(files)):
        _entry(out, ino, d, 0o040755)
        ino += 1
    for path in sorted(files):
        mode, body = files[path]
        _entry(out, ino, path, mode, body)
        ino += 1
    _entry(out, ino, "TRAILER!!!", 0)
    return gzip.compress(out.getvalue(), compresslevel=6, mtime=0)
