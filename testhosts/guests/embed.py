"""Roots for the in-process QEMU driver, ``qemu:///embed?root=DIR`` (no daemon).

* KVM works under embed only when the root's ``etc/qemu.conf`` makes QEMU run as root
  (:data:`EMBED_QEMU_CONF`); with the defaults QEMU runs as ``libvirt-qemu`` and gets "Could not
  access KVM kernel module: Permission denied" (``/dev/kvm`` is ``crw------- root``).
* Without a QEMU capabilities cache the embedded driver probes QEMU on the first guest start
  (about 4 s here); seeded with one (:func:`seed_capabilities`) that start takes about 0.4 s.
  libvirt re-validates the copied XML (ctimes, versions) and re-probes if it is stale.
* Only one embedded root can be used per process (a second one fails with "already open with
  path ..."): tests share :func:`process_embed_root`. The embedded driver also takes over every
  ``qemu:///`` URI of its process, so it runs in a process of its own.
* Keep a root short: the monitor socket is ``root/lib/qemu/domain-N-<name[:20]>/monitor.sock``
  and UNIX socket paths are limited to 107 bytes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import urllib.parse
from pathlib import Path

#: qemu.conf of an embed root: QEMU as root (so it can open /dev/kvm), no security driver.
EMBED_QEMU_CONF = 'user = "root"\ngroup = "root"\nsecurity_driver = "none"\n'

#: Where a fresh embed root copies its QEMU capabilities cache from, first found wins. The first
#: is refreshed from the process root when a test process exits.
EMBED_CAPS_SEEDS = (
    Path("/var/tmp/vdtest-embed-qemu-caps"),
    Path("/var/cache/libvirt/qemu/capabilities"),
)
_CAPS_SUBDIR = Path("cache", "qemu", "capabilities")


def embed_uri(root: str | os.PathLike[str]) -> str:
    return f"qemu:///embed?root={os.fspath(root)}"


def embed_root_of(uri: str) -> Path | None:
    """The root directory of a ``qemu:///embed?root=DIR`` URI, else None."""
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme != "qemu" or parsed.path != "/embed":
        return None
    roots = urllib.parse.parse_qs(parsed.query).get("root")
    return Path(roots[0]) if roots else None


def seed_capabilities(root: str | os.PathLike[str]) -> bool:
    """Copy a QEMU capabilities cache into ``root``; False when no seed was found."""
    dest = Path(root, _CAPS_SUBDIR)
    for seed in EMBED_CAPS_SEEDS:
        try:
            files = sorted(f for f in seed.iterdir() if f.suffix == ".xml")
        except OSError:
            continue
        if not files:
            continue
        dest.mkdir(parents=True, exist_ok=True)
        for f in files:
            with contextlib.suppress(OSError):
                shutil.copyfile(f, dest / f.name)
        return True
    return False


def save_capabilities(root: str | os.PathLike[str]) -> None:
    """Keep ``root``'s (possibly re-probed) capabilities as the seed of the next roots."""
    seed = EMBED_CAPS_SEEDS[0]
    try:
        seed.mkdir(parents=True, exist_ok=True)
        for f in Path(root, _CAPS_SUBDIR).glob("*.xml"):
            tmp = seed / f".{f.name}.{os.getpid()}"
            shutil.copyfile(f, tmp)
            os.replace(tmp, seed / f.name)
    except OSError:
        pass


def prepare_embed_root(root: str | os.PathLike[str], *, qemu_conf: str = EMBED_QEMU_CONF,
                       seed: bool = False) -> str:
    """Write ``root/etc/qemu.conf`` (by default QEMU as root, no security driver); returns the
    embed URI. ``seed`` also copies a capabilities cache in (:func:`seed_capabilities`)."""
    etc = Path(root, "etc")
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "qemu.conf").write_text(qemu_conf)
    if seed:
        seed_capabilities(root)
    return embed_uri(root)


_embed_root_lock = threading.Lock()
_embed_root: Path | None = None


def _cleanup_embed_root(root: Path) -> None:
    save_capabilities(root)
    shutil.rmtree(root, ignore_errors=True)


def process_embed_root() -> Path:
    """The one embedded-driver root of this process, created on first use.

    A short directory under /tmp, prepared and seeded by :func:`prepare_embed_root`, removed
    (its capabilities saved as the next seed) when the process exits.
    """
    global _embed_root
    with _embed_root_lock:
        if _embed_root is None:
            root = Path(tempfile.mkdtemp(prefix="vdemb-", dir="/tmp"))
            prepare_embed_root(root, seed=True)
            atexit.register(_cleanup_embed_root, root)
            _embed_root = root
        return _embed_root
