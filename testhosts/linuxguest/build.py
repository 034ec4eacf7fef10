"""Build the test guest's kernel and initramfs from Debian packages, cached by their inputs.

``python -m testhosts.linuxguest [CACHE]`` builds it and prints the cache directory (``vmlinuz``,
``initrd.gz``, ``manifest.json``). The packages are fetched with ``apt-get download`` and
unpacked with ``dpkg-deb -x``: no kernel is installed on the host. The initramfs holds busybox,
a few sg3-utils tools with their libraries, the modules in :data:`MODULES` and their
dependencies, and ``init.sh`` as ``/init``. The cache key hashes the package versions, the host
libraries copied in and this builder's own sources; a build takes a few seconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from testhosts.linuxguest.initramfs import (
    builtin_modules,
    cpio_gz,
    load_order,
    module_bytes,
    module_index,
)

CACHE = Path(os.environ.get("VIRTDRIVER_LINUXGUEST_CACHE", "/var/tmp/virtdriver-linuxguest"))
KERNEL_META = "linux-image-amd64"
PACKAGES = ("busybox-static", "sg3-utils")  # and sg3-utils' library, named by its Depends
MODULES = ("virtio_pci", "virtio_scsi", "sd_mod", "virtio_console", "crct10dif_generic")
SG_TOOLS = ("sg_persist", "sg_raw", "sg_inq", "sg_readcap", "sg_turs")
HERE = Path(__file__).resolve().parent
SOURCES = (HERE / "build.py", HERE / "initramfs.py", HERE / "init.sh")


def _run(*cmd: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def kernel_package() -> str:
    """The versioned kernel package that ``linux-image-amd64`` depends on."""
    return depended_on(KERNEL_META, "linux-image-")


def depended_on(package: str, prefix: str) -> str:
    """The package named ``prefix...`` that ``package`` depends on in this suite."""
    candidate_version(package)  # reads the package lists first if there are none
    found = re.search(rf"Depends: ({re.escape(prefix)}\S+)", _run("apt-cache", "depends", package))
    if not found:
        raise RuntimeError(f"apt-cache knows no {prefix}* behind {package}")
    return found.group(1)


def candidate_version(package: str) -> str:
    """The version ``apt-get download`` would fetch; the package lists are read once first
    if this machine has none (a fresh image with /var/lib/apt/lists emptied)."""
    for attempt in (1, 2):
        found = re.search(r"Candidate: (\S+)", _run("apt-cache", "policy", package))
        if found and found.group(1) != "(none)":
            return found.group(1)
        if attempt == 1:
            _run("apt-get", "update", "-qq")
    raise RuntimeError(f"apt has no candidate for {package}")


def fetch_deb(package: str, version: str, debs: Path) -> Path:
    """``package_version_*.deb`` in ``debs``, downloaded by apt-get when not there yet."""
    pattern = f"{package}_{version.replace(':', '%3a')}_*.deb"
    found = sorted(debs.glob(pattern))
    if not found:
        _run("apt-get", "download", f"{package}={version}", cwd=debs)
        found = sorted(debs.glob(pattern))
    if not found:
        raise RuntimeError(f"apt-get download {package}={version} left no {pattern}")
    return found[0]


def shared_libraries(binary: Path, extra_lib_dir: Path) -> list[tuple[str, Path]]:
    """(path in the guest, file on the host) of each library ``binary`` loads (ldd)."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(extra_lib_dir))
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, env=env).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            libs.append((f"lib/x86_64-linux-gnu/{parts[0]}", Path(parts[2]).resolve()))
        elif parts and parts[0].startswith("/"):  # the dynamic loader
            libs.append((parts[0].lstrip("/"), Path(parts[0]).resolve()))
    return libs


def _inputs() -> tuple[dict[str, str], str]:
    wanted = (kernel_package(), *PACKAGES, depended_on("sg3-utils", "libsgutils2-"))
    versions = {p: candidate_version(p) for p in wanted}
    h = hashlib.sha256(json.dumps(versions, sort_keys=True).encode())
    for src in SOURCES:
        h.update(src.read_bytes())
    for lib in ("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"):
        h.update(Path(lib).resolve().read_bytes())
    return versions, h.hexdigest()[:16]


def merged(tree: Path, path: str) -> Path:
    """``path`` in an unpacked package tree: Debian 13's packages put /bin and /lib under /usr."""
    plain = tree / path
    return plain if plain.exists() else tree / "usr" / path


def _assemble(versions: dict[str, str], debs: Path,
              tree: Path) -> tuple[bytes, Path, dict[str, object]]:
    for package, version in versions.items():
        _run("dpkg-deb", "-x", str(fetch_deb(package, version, debs)), str(tree))
    kernel = next(p for p in versions if p.startswith("linux-image-"))
    release = kernel.removeprefix("linux-image-")
    modules = merged(tree, f"lib/modules/{release}")
    index = module_index(modules)
    order = load_order(index, MODULES, builtin_modules(modules))
    files: dict[str, tuple[int, bytes]] = {
        "init": (0o100755, (HERE / "init.sh").read_bytes()),
        "bin/busybox": (0o100755, merged(tree, "bin/busybox").read_bytes()),
        "lib/modules/load.order": (0o100644, "".join(f"{m}.ko\n" for m in order).encode()),
    }
    for name in order:
        files[f"lib/modules/{name}.ko"] = (0o100644, module_bytes(index[name]))
    lib_dir = tree / "usr/lib/x86_64-linux-gnu"
    for tool in SG_TOOLS:
        files[f"usr/bin/{tool}"] = (0o100755, (tree / "usr/bin" / tool).read_bytes())
        for guest_path, host_file in shared_libraries(tree / "usr/bin" / tool, lib_dir):
            files[guest_path] = (0o100755, host_file.read_bytes())
    vmlinuz = tree / "boot" / f"vmlinuz-{release}"
    manifest: dict[str, object] = {"packages": versions, "kernel": release, "modules": order,
                                   "tools": list(SG_TOOLS)}
    return cpio_gz(files), vmlinuz, manifest


def build(cache: Path = CACHE) -> Path:
    """The cache directory of the current inputs, built first if missing."""
    versions, key = _inputs()
    out = cache / key
    if (out / "manifest.json").exists():
        return out
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    with open(cache / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "manifest.json").exists():
            return out
        with tempfile.TemporaryDirectory(dir=cache, prefix="build-") as tmp:
            initrd, vmlinuz, manifest = _assemble(versions, debs, Path(tmp, "tree"))
            staged = Path(tmp, "out")
            staged.mkdir()
            shutil.copyfile(vmlinuz, staged / "vmlinuz")
            (staged / "initrd.gz").write_bytes(initrd)
            (staged / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
            for each in staged.iterdir():
                each.chmod(0o644)
            staged.chmod(0o755)
            staged.rename(out)
    return out
