"""Ownership under libvirt's DAC security driver, and the read-only guarantee, on real guests.

These run with QEMU as ``libvirt-qemu`` and ``dynamic_ownership = 1`` (libvirt chowns each disk
to QEMU's user on attach and gives an unshared read-write disk back to its owner on detach). They
need an embedded driver root of their own — one root per process, and the other embed tests'
root runs QEMU as root — so the embed child run (tests/host/test_embed.py) starts them once more
in a process of their own (``VIRTDRIVER_DAC_CHILD=1``).

That process runs in a private mount namespace where ``/dev/kvm`` is a ``root:kvm 0660`` node
of the same device (``libvirt-qemu`` is in group ``kvm``). The host's ``/dev/kvm`` stays
``root 0600``; without this, QEMU as ``libvirt-qemu`` has no KVM, and libvirt 9.0 re-probes QEMU's
capabilities about ten times per guest start ("KVM was enabled when probing, but it is not
available now"), about 40 s each.

What is checked:
- a shared (multiattach) file or loop device attached to guests A and B: detaching A leaves it
  owned by QEMU's user (libvirt never restores shared disks), and B still reads and writes it;
- a disk that is not shared goes back to its owner (uid, gid, mode) on detach;
- the ``explicit`` and ``none`` label policies render and attach on real guests; ``none`` leaves
  ownership alone (storage whose owner is managed elsewhere), and QEMU is refused a disk it cannot
  open without relabelling;
- a write through a read-only attachment is refused by QEMU, for every backend here.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from testhosts.guests import (
    Guests,
    LoopDevice,
    ReadOnlyWrite,
    block_info,
    open_connection,
    prepare_embed_root,
    read_pattern,
    write_pattern,
)
from tests.support import EMBED_CHILD, ROOT
from tests.support.volumes import file_volume, local_volume
from virtdriver.errors import AttachFailed, UnsafeAttachment

pytestmark = pytest.mark.hypervisor

DAC_CHILD = os.environ.get("VIRTDRIVER_DAC_CHILD") == "1"
QEMU_USER = "libvirt-qemu"
DAC_QEMU_CONF = (f'user = "{QEMU_USER}"\ngroup = "{QEMU_USER}"\ndynamic_ownership = 1\n'
                 'remember_owner = 1\n')
OWNER = (4242, 4243)  # some storage owner that is not QEMU
SHARED_LABEL = "system_u:object_r:svirt_image_t:s0"

# The namespace the DAC child runs in: /dev/kvm usable by group kvm, nothing else changed.
KVM_NAMESPACE = """set -e
node="$1/kvm"
mknod "$node" c 10 232
chown root:kvm "$node"
chmod 0660 "$node"
mount --bind "$node" /dev/kvm
shift
exec "$@"
"""


# ---- the launcher (in the ordinary embed child) -------------------------------------------------

@pytest.mark.skipif(DAC_CHILD or not EMBED_CHILD, reason="this is the DAC child itself")
def test_dac_labels_in_their_own_process(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or not Path("/dev/kvm").exists():
        pytest.skip("needs unshare and /dev/kvm for a private, KVM-capable mount namespace")
    env = dict(os.environ, VIRTDRIVER_EMBED_CHILD="1", VIRTDRIVER_DAC_CHILD="1")
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", KVM_NAMESPACE, "sh",
         str(tmp_path), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-k", "not in_their_own_process", str(Path(__file__).relative_to(ROOT))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last and "failed" not in last, last


needs_dac_child = pytest.mark.skipif(not DAC_CHILD, reason="runs in the DAC child process")


# ---- fixtures of the DAC child ------------------------------------------------------------------

def qemu_ids() -> tuple[int, int]:
    return pwd.getpwnam(QEMU_USER).pw_uid, grp.getgrnam(QEMU_USER).gr_gid


@pytest.fixture(scope="module")
def dac_conn() -> Iterator[libvirt.virConnect]:
    root = Path(tempfile.mkdtemp(prefix="vddac-", dir="/tmp"))
    os.chmod(root, 0o755)  # QEMU as libvirt-qemu must reach its master key below it
    conn = open_connection(prepare_embed_root(root, qemu_conf=DAC_QEMU_CONF, seed=True))
    try:
        assert "<model>dac</model>" in conn.getCapabilities()
        yield conn
    finally:
        conn.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def dac_guests(dac_conn) -> Iterator[Guests]:
    with Guests(dac_conn) as made:
        yield made


@pytest.fixture
def volumes() -> Iterator[Path]:
    """A directory QEMU's user can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="vddacv-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def driver_factory(dac_conn, tmp_path) -> Iterator[Any]:
    from virtdriver import LibvirtVolumeDriver

    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        driver = LibvirtVolumeDriver(dac_conn.getURI(), state_dir=tmp_path / f"s{len(made)}",
                                     **kwargs)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        driver.close()


def owned_file(directory: Path, name: str, owner: tuple[int, int] = OWNER,
               mode: int = 0o600) -> Path:
    path = directory / name
    with open(path, "wb") as fh:
        fh.truncate(16 << 20)
    os.chown(path, *owner)
    os.chmod(path, mode)
    return path


def ownership(path: str | Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_uid, st.st_gid, st.st_mode & 0o7777


def qemu_pid(dom: libvirt.virDomain) -> int:
    from testhosts.guests import embed_root_of

    root = embed_root_of(dom.connect().getURI())
    assert root is not None
    return int((root / "run" / "qemu" / f"{dom.name()}.pid").read_text().strip())


def as_qemu_sees_it(dom: libvirt.virDomain, device: str) -> tuple[int, int, int]:
    """Owner and mode of ``device`` in the guest's QEMU (libvirt gives each QEMU its own /dev)."""
    return ownership(f"/proc/{qemu_pid(dom)}/root{device}")


# ---- 1. shared disks stay usable; unshared disks are given back --------------------------------

@needs_dac_child
def test_a_shared_file_stays_qemus_when_one_guest_detaches(
        dac_guests, driver_factory, volumes) -> None:
    driver = driver_factory()
    a, b = dac_guests.start("a"), dac_guests.start("b")
    path = owned_file(volumes, "shared.raw")
    info = file_volume(str(path), multiattach=True)
    vid, alias = info["data"]["volume_id"], f"ua-{info['data']['volume_id']}"
    before = ownership(path)
    driver.attach_volume(info, a.name())
    driver.attach_volume(info, b.name())
    attached = ownership(path)
    assert attached[:2] == qemu_ids() and attached[2] == before[2]
    write_pattern(a, alias, 0x31)
    assert read_pattern(b, alias, 0x31)

    driver.detach_volume(a.name(), vid)
    # libvirt must not give a shared disk back to its owner while B uses it.
    assert ownership(path) == attached
    write_pattern(b, alias, 0x32, offset=8192)
    assert read_pattern(b, alias, 0x32, offset=8192) and read_pattern(b, alias, 0x31)

    driver.detach_volume(b.name(), vid)
    assert ownership(path) == attached  # never restored for shared disks (libvirt's rule)


@needs_dac_child
def test_a_shared_loop_device_stays_qemus_in_the_remaining_guest(
        dac_guests, driver_factory) -> None:
    driver = driver_factory()
    a, b = dac_guests.start("a"), dac_guests.start("b")
    with LoopDevice(16 << 20) as loop:
        assert loop.device is not None
        os.chown(loop.device, *OWNER)
        os.chmod(loop.device, 0o600)
        host_before = ownership(loop.device)
        info = local_volume(loop.device, multiattach=True)
        vid, alias = info["data"]["volume_id"], f"ua-{info['data']['volume_id']}"
        driver.attach_volume(info, a.name(), attach_mode="ro")
        driver.attach_volume(info, b.name())
        for dom in (a, b):
            assert as_qemu_sees_it(dom, loop.device)[:2] == qemu_ids()
        driver.detach_volume(a.name(), vid)
        assert as_qemu_sees_it(b, loop.device)[:2] == qemu_ids()
        write_pattern(b, alias, 0x44)
        assert read_pattern(b, alias, 0x44)
        driver.detach_volume(b.name(), vid)
        # Each QEMU got its own copy of the node: the host's device was never changed.
        assert ownership(loop.device) == host_before


@needs_dac_child
@pytest.mark.parametrize("mode", [0o600, 0o640])
def test_an_unshared_disk_is_given_back_to_its_owner(dac_guests, driver_factory, volumes,
                                                     mode: int) -> None:
    # Owned by root, the owner libvirt restores even without its remembered-owner xattrs: on
    # this VM the kernel's boot time (which libvirt stamps those xattrs with) drifts by a second
    # now and then, libvirt then logs "Invalid XATTR timestamp" and falls back to root:root, so a
    # non-root owner would make this test flaky for a reason outside virtdriver.
    driver = driver_factory()
    a = dac_guests.start("a")
    path = owned_file(volumes, "single.raw", owner=(0, 0), mode=mode)
    info = file_volume(str(path), multiattach=False)
    vid, alias = info["data"]["volume_id"], f"ua-{info['data']['volume_id']}"
    before = ownership(path)
    driver.attach_volume(info, a.name())
    assert ownership(path)[:2] == qemu_ids()
    write_pattern(a, alias, 0x55)
    driver.detach_volume(a.name(), vid)
    assert ownership(path) == before


# ---- 2. the label policies on real guests -----------------------------------------------------

@needs_dac_child
def test_the_explicit_policy_is_refused_without_selinux(dac_guests, driver_factory,
                                                       volumes) -> None:
    # explicit pins an SELinux context: on a host whose libvirt runs no SELinux driver the
    # guest could not start again with it in its definition, so it is refused before anything.
    driver = driver_factory(label_policy="explicit", shared_image_label=SHARED_LABEL)
    a = dac_guests.start("a")
    path = owned_file(volumes, "explicit.raw")
    before = ownership(path)
    info = file_volume(str(path), multiattach=True)
    with pytest.raises(UnsafeAttachment, match=r"runs no SELinux security driver \(its security "
                                               r"drivers: [a-z, ]*dac\)"):
        driver.attach_volume(info, a.name())
    for flags in (0, libvirt.VIR_DOMAIN_XML_INACTIVE):
        assert f"ua-{info['data']['volume_id']}" not in a.XMLDesc(flags)
    assert ownership(path) == before
    assert driver.records.connected() == []


@needs_dac_child
def test_the_none_policy_leaves_ownership_alone(dac_guests, driver_factory, volumes) -> None:
    driver = driver_factory(label_policy="none")
    a = dac_guests.start("a")
    # Storage whose owner is managed elsewhere: already QEMU's, group-readable by the owner.
    managed = owned_file(volumes, "managed.raw", owner=qemu_ids(), mode=0o660)
    info = file_volume(str(managed), multiattach=False)
    vid, alias = info["data"]["volume_id"], f"ua-{info['data']['volume_id']}"
    driver.attach_volume(info, a.name())
    live = a.XMLDesc(0)
    # Only the model libvirt runs here: a selinux label would stop the guest's next start.
    assert "model='dac' relabel='no'" in live and "model='selinux'" not in live
    write_pattern(a, alias, 0x77)
    driver.detach_volume(a.name(), vid)
    assert ownership(managed) == (*qemu_ids(), 0o660)  # not "restored" to root either

    # A disk QEMU's user cannot open, with relabelling off: QEMU is refused, nothing is left.
    private = owned_file(volumes, "private.raw")
    info = file_volume(str(private), multiattach=False)
    with pytest.raises(AttachFailed) as caught:
        driver.attach_volume(info, a.name())
    message = str(caught.value)
    assert "Permission denied" in message and "QEMU runs as" in message, message
    assert f"cannot open {private} (owner " in message and "label_policy 'auto'" in message
    assert ownership(private) == (*OWNER, 0o600)
    assert f"ua-{info['data']['volume_id']}" not in a.XMLDesc(0)
    assert f"ua-{info['data']['volume_id']}" not in a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert driver.records.connected() == []


@needs_dac_child
@pytest.mark.parametrize("swap_policy", ["auto", "none"])
def test_a_swap_keeps_the_label_policy_live_and_defined(dac_guests, driver_factory, volumes,
                                                         swap_policy) -> None:
    """A disk attached with ``none`` keeps ``relabel='no'`` across a swap, in the running guest
    and in its definition alike, whatever the swapping driver's own policy."""
    a = dac_guests.start("swap-labels")
    old_file = owned_file(volumes, "old.raw", owner=qemu_ids(), mode=0o660)
    new_file = owned_file(volumes, "new.raw", owner=qemu_ids(), mode=0o660)
    old = file_volume(str(old_file), multiattach=False)
    new = file_volume(str(new_file), multiattach=False)
    driver_factory(label_policy="none").attach_volume(old, a.name())
    swapper = driver_factory(label_policy=swap_policy)
    after = swapper.swap_volume(a.name(), old, new)
    assert after.source == str(new_file)
    for flags in (0, libvirt.VIR_DOMAIN_XML_INACTIVE):
        xml = a.XMLDesc(flags)
        assert str(new_file) in xml and str(old_file) not in xml, xml
        assert "model='dac' relabel='no'" in xml, (flags, xml)
    assert ownership(new_file) == (*qemu_ids(), 0o660)  # nothing relabelled


# ---- 3. the read-only guarantee, for every backend here -----------------------------------------

@needs_dac_child
@pytest.mark.parametrize("multiattach", [False, True], ids=["single", "multiattach"])
@pytest.mark.parametrize("backend", ["local-loop", "gpfs-file"])
def test_a_read_only_attachment_refuses_writes(backend: str, multiattach: bool, dac_guests,
                                               driver_factory, volumes) -> None:
    driver = driver_factory()
    a, b = dac_guests.start("a"), dac_guests.start("b")
    with LoopDevice(16 << 20) as loop:
        assert loop.device is not None
        if backend == "local-loop":
            info = local_volume(loop.device, multiattach=multiattach)
        else:
            info = file_volume(str(owned_file(volumes, "ro.raw")), multiattach=multiattach)
        vid, alias = info["data"]["volume_id"], f"ua-{info['data']['volume_id']}"
        if multiattach:
            driver.attach_volume(info, a.name(), attach_mode="rw")
            write_pattern(a, alias, 0x5A)
        reader = b if multiattach else a
        driver.attach_volume(info, reader.name(), attach_mode="ro")
        assert block_info(reader, alias).ro
        with pytest.raises(ReadOnlyWrite):
            write_pattern(reader, alias, 0x01)
        with pytest.raises(ReadOnlyWrite):
            write_pattern(reader, alias, 0x01, offset=1 << 20, length=512)
        assert read_pattern(reader, alias, 0x5A if multiattach else 0x00)
        for dom in {a, b} if multiattach else {a}:
            driver.detach_volume(dom.name(), vid)
        assert driver.records.connected() == []
