"""The domains' XML kept between operations (``hypervisor/xmlcache.py``): read again whenever
libvirt saved anything new of a domain, never used before this process saw its own change reach
the saved files, and never again if one did not.

The unit part stands in for libvirt's saved files with a directory of its own; the hypervisor part
changes guests behind the driver's back with raw libvirt calls (a disk added to a definition
only, a hot-plug, a new definition, a stop) and checks that the driver's next decision sees each.
"""

from __future__ import annotations

from pathlib import Path

import libvirt
import pytest

from virtdriver.hypervisor.domains import ListedDomain
from virtdriver.hypervisor.xmlcache import XmlCache


class FakeDom:
    def __init__(self, name: str) -> None:
        self.name = name
        self.live = f"<domain><name>{name}</name><!-- live 0 --></domain>"
        self.config = f"<domain><name>{name}</name><!-- config 0 --></domain>"
        self.reads = 0
        self.gone = False

    def XMLDesc(self, flags: int) -> str:  # noqa: N802 - libvirt's name
        if self.gone:
            exc = libvirt.libvirtError("gone")
            exc.err = (libvirt.VIR_ERR_NO_DOMAIN, 0, "gone", 0, "", None, None, 0, 0)
            raise exc
        self.reads += 1
        return self.config if flags & libvirt.VIR_DOMAIN_XML_INACTIVE else self.live


class Saved:
    """libvirt's two directories, and a domain's files in them."""

    def __init__(self, root: Path) -> None:
        self.config, self.state = root / "etc", root / "run"
        self.config.mkdir()
        self.state.mkdir()

    def save(self, name: str, config: str | None = None, state: str | None = None) -> None:
        if config is not None:
            (self.config / f"{name}.xml").write_text(config)
        if state is not None:
            (self.state / f"{name}.xml").write_text(state)


def listed(dom: FakeDom, active: bool = True, persistent: bool = True,
           name: str | None = None) -> ListedDomain:
    return ListedDomain(dom, name or dom.name, f"uuid-{dom.name}", active, persistent)


def test_kept_only_while_the_saved_files_are_the_same_and_only_once_trusted(tmp_path) -> None:
    files = Saved(tmp_path)
    cache = XmlCache(files.config, files.state)
    a, b = FakeDom("a"), FakeDom("b")
    files.save("a", "cfg a 0", "state a 0")
    files.save("b", "cfg b 0", "state b 0")
    cache.read([listed(a), listed(b)])
    cache.read([listed(a), listed(b)])
    assert (a.reads, b.reads) == (4, 4)  # not trusted yet: read every time
    before = cache.saved(listed(a))
    files.save("a", state="state a 1")  # what libvirt does when we hot-plug
    cache.confirm(listed(a), before)
    assert cache.trusted
    cache.read([listed(a), listed(b)])  # a changed since it was read: read; b: read (first
    reads = (a.reads, b.reads)          # read since trusted is still the same bytes -> kept)
    cache.read([listed(a), listed(b)])
    assert (a.reads, b.reads) == reads  # nothing new saved: nothing read
    b.config = "<domain><name>b</name><!-- config 1 --></domain>"
    files.save("b", config=b.config)  # a change to b's definition only
    xml = {x.listed.name: x for x in cache.read([listed(a), listed(b)])}
    # both asked of libvirt: only a live state of ours was seen changing, not a definition
    assert xml["b"].config == b.config and a.reads == reads[0] and b.reads == reads[1] + 2
    before = cache.saved(listed(a))
    a.config = "<domain><name>a</name><!-- config 1 --></domain>"
    files.save("a", config=a.config)  # what libvirt does when we attach to a's definition
    cache.confirm(listed(a), before)
    b.config = "<domain><name>b</name><!-- config 2 --></domain>"
    files.save("b", config=b.config)
    reads = (a.reads, b.reads)
    xml = {x.listed.name: x for x in cache.read([listed(a), listed(b)])}
    # now a definition is the file libvirt keeps it in: only the live XML is asked of libvirt
    assert xml["a"].config == a.config and xml["b"].config == b.config
    assert (a.reads, b.reads) == (reads[0] + 1, reads[1] + 1)
    # b stopped: its flags differ, and it has no live state file any more
    (files.state / "b.xml").unlink()
    before_reads = b.reads
    cache.read([listed(a), listed(b, active=False)])
    assert b.reads == before_reads + 1
    # renamed: another name, other files
    files.save("b2", "cfg b 1")
    cache.read([listed(a), listed(b, active=False, name="b2")])
    assert b.reads == before_reads + 2


def test_a_change_of_ours_that_does_not_show_in_the_files_ends_the_cache(tmp_path) -> None:
    files = Saved(tmp_path)
    cache = XmlCache(files.config, files.state)
    a = FakeDom("a")
    files.save("a", "cfg", "state")
    cache.read([listed(a)])
    cache.confirm(listed(a), cache.saved(listed(a)))  # the files did not change
    assert not cache.trusted and not cache.watching
    files.save("a", state="state 1")
    cache.confirm(listed(a), ("cfg".encode(), b"state"))  # even a later change cannot trust it
    reads = a.reads
    cache.read([listed(a)])
    cache.read([listed(a)])
    assert a.reads == reads + 4


def test_one_list_call_only_once_a_definitions_change_was_seen(tmp_path) -> None:
    """The definitions' files stand in for libvirt's list of defined domains only after a change
    of ours was seen in that directory itself (a change to a live state alone trusts the cache
    for the XML, not for the flags)."""
    files = Saved(tmp_path)
    cache = XmlCache(files.config, files.state)
    a, t = FakeDom("a"), FakeDom("t")
    files.save("a", "cfg", "state")
    files.save("t", state="state t")  # running and transient: no definition file
    cache.confirm(listed(t, persistent=False), (None, b"state t 0"))  # a live change only
    assert cache.trusted and cache.watching and not cache.definitions_trusted
    cache.confirm(listed(a), (b"cfg 0", b"state"))  # its definition changed too
    assert cache.definitions_trusted and not cache.watching
    assert cache.definition("a") == (True, b"cfg") and cache.definition("t") == (False, None)
    # the definition's bytes the listing read are the key's (read before any XML), once
    as_listed = ListedDomain(a, "a", "uuid-a", True, True, b"cfg as listed")
    assert cache.saved(as_listed, as_listed=True) == (b"cfg as listed", b"state")
    assert cache.saved(as_listed) == (b"cfg", b"state")  # after a change of ours: read anew
    cache.forget()  # a new connection: perhaps another daemon
    assert not cache.definitions_trusted and cache.watching


def test_missing_files_mean_reading_and_a_vanished_domain_is_left_out(tmp_path) -> None:
    files = Saved(tmp_path)
    cache = XmlCache(files.config, files.state)
    a, t = FakeDom("a"), FakeDom("t")
    files.save("a", "cfg", "state")
    cache.confirm(listed(a), (b"other", b"state"))
    assert cache.trusted
    files.save("t", state="state t")  # a running transient domain: no definition file
    cache.read([listed(t, persistent=False)])
    cache.read([listed(t, persistent=False)])
    assert t.reads == 1  # read once (running and transient: live XML only), then kept
    (files.state / "t.xml").unlink()  # its state file unreadable: read every time
    cache.read([listed(t, persistent=False)])
    cache.read([listed(t, persistent=False)])
    assert t.reads == 3
    t.gone = True
    assert cache.read([listed(t, persistent=False), listed(a)])[0].listed.name == "a"


def test_only_for_the_hosts_own_qemu_driver() -> None:
    assert XmlCache.for_uri("qemu:///session") is None
    assert XmlCache.for_uri("qemu+ssh://elsewhere/system") is None
    assert XmlCache.for_uri("qemu:///embed?root=/tmp/x") is None


@pytest.mark.hypervisor
def test_the_driver_sees_every_change_made_behind_its_back(guests, volume_driver,
                                                          tmp_path) -> None:
    """Once the driver trusts its cache (after its first attach), changes made with raw libvirt
    calls between two of its decisions are seen by the next one."""
    from tests.support.volumes import file_volume
    from virtdriver.errors import VolumeInUse

    if volume_driver.connection.xml is None:
        pytest.skip("this libvirt's saved state is not where the host's QEMU driver keeps it")
    a, b, c = guests.start("a"), guests.start("b"), guests.start("c")
    image, other = tmp_path / "data.raw", tmp_path / "other.raw"
    for path in (image, other):
        path.write_bytes(b"\0" * 65536)
    warm = file_volume(str(other), multiattach=True)
    volume_driver.attach_volume(warm, c.name())  # the driver now trusts what it keeps
    assert volume_driver.connection.xml.trusted
    info = file_volume(str(image), multiattach=False)
    foreign = (f"<disk type='file' device='disk'><driver name='qemu' type='raw'/>"
               f"<source file='{image}'/><target dev='sdc' bus='scsi'/></disk>")
    for flags in (libvirt.VIR_DOMAIN_AFFECT_CONFIG, libvirt.VIR_DOMAIN_AFFECT_LIVE,
                  libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG):
        volume_driver.volume_users(warm["data"]["volume_id"])  # a read of the whole host
        a.attachDeviceFlags(foreign, flags)
        with pytest.raises(VolumeInUse, match="under another name"):
            volume_driver.attach_volume(info, b.name())
        a.detachDeviceFlags(foreign, flags)
        if flags & libvirt.VIR_DOMAIN_AFFECT_LIVE:
            import time

            deadline = time.monotonic() + 10
            while str(image) in a.XMLDesc(0) and time.monotonic() < deadline:
                time.sleep(0.05)
    # a new definition holding the data, then that guest stopped: still a user of it
    volume_driver.attach_volume(info, b.name())
    xml = a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    a.destroy()
    a.connect().defineXML(xml.replace("</devices>", foreign + "</devices>"))
    volume_driver.detach_volume(b.name(), info["data"]["volume_id"])
    assert volume_driver.host.connected() == sorted([warm["data"]["volume_id"],
                                                     info["data"]["volume_id"]])


@pytest.mark.hypervisor
def test_one_list_call_once_trusted_gives_libvirts_own_flags(guests, volume_driver, system_conn,
                                                            tmp_path) -> None:
    """Once the cache is trusted, the host is listed with one call to libvirtd, and each
    domain's flags are libvirt's own: running or not from the list's ids, defined or not from
    the definition's file, through a define of a running transient guest and an undefine of a
    running persistent one."""
    from tests.support.volumes import file_volume
    from virtdriver.hypervisor.domains import list_domains

    connection = volume_driver.connection
    if connection.xml is None:
        pytest.skip("this libvirt's saved state is not where the host's QEMU driver keeps it")
    persistent, transient = guests.start("p"), guests.start("t", persistent=False)
    stopped = guests.start("s")
    stopped.destroy()
    image = tmp_path / "warm.raw"
    image.write_bytes(b"\0" * 65536)
    assert not connection.xml.definitions_trusted  # not before its own change was seen
    volume_driver.attach_volume(file_volume(str(image), multiattach=True), persistent.name())
    assert connection.xml.definitions_trusted

    def flags() -> dict[str, tuple[bool, bool]]:
        mine = {persistent.name(), transient.name(), stopped.name()}
        return {d.name: (d.active, d.persistent) for d in connection.list_domains()
                if d.name in mine}

    def libvirts() -> dict[str, tuple[bool, bool]]:
        mine = {persistent.name(), transient.name(), stopped.name()}
        return {d.name: (d.active, d.persistent) for d in list_domains(system_conn)
                if d.name in mine}

    calls = []
    real = libvirt.virConnect.listAllDomains

    def counted(self, flags=0):  # noqa: ANN001 - libvirt's own signature
        calls.append(flags)
        return real(self, flags)

    libvirt.virConnect.listAllDomains = counted
    try:
        assert flags() == {persistent.name(): (True, True), transient.name(): (True, False),
                           stopped.name(): (False, True)}
    finally:
        libvirt.virConnect.listAllDomains = real
    assert calls == [0]
    # a running transient guest defined, a running persistent one undefined
    system_conn.defineXML(transient.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    guests.adopt(transient.name(), persistent=True)
    persistent.undefine()
    guests.adopt(persistent.name(), persistent=False)
    assert flags() == libvirts() == {persistent.name(): (True, False),
                                     transient.name(): (True, True),
                                     stopped.name(): (False, True)}


@pytest.mark.hypervisor
def test_a_running_guests_saved_definition_is_what_libvirt_returns_for_it(
        guests, volume_driver, system_conn, tmp_path) -> None:
    """The XML cache takes a running guest's definition from the file libvirt saves it in
    (once trusted): for every disk decision it is what ``XMLDesc(VIR_DOMAIN_XML_INACTIVE)``
    returns -- the driver's own disks, one in the definition only, a swap note's metadata."""
    from tests.support.volumes import file_volume
    from virtdriver.config import DomainDisks
    from virtdriver.hypervisor.metadata import set_note
    from virtdriver.hypervisor.xmlcache import CONFIG_DIR

    guest = guests.start("def")
    images = [tmp_path / f"{n}.raw" for n in ("a", "b", "c")]
    for path in images:
        path.write_bytes(b"\0" * 65536)
    rw = volume_driver.attach_volume(file_volume(str(images[0]), multiattach=True), guest.name())
    volume_driver.attach_volume(file_volume(str(images[1]), multiattach=True), guest.name(),
                                attach_mode="ro")
    guest.attachDeviceFlags(f"<disk type='file' device='disk'><driver name='qemu' type='raw'/>"
                            f"<source file='{images[2]}'/><target dev='vdc' bus='virtio'/>"
                            "</disk>", libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    set_note(guest, f"ua-{rw.volumeId}", "5b1e0c3a-7f2d-4e8b-9a61-3c4d5e6f7a8b",
             f"file|{images[0]}", live=False, persistent=True)
    saved = (CONFIG_DIR / f"{guest.name()}.xml").read_text()
    returned = guest.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    from_file, from_libvirt = DomainDisks.from_xml(saved), DomainDisks.from_xml(returned)
    assert len(from_file.disks) == 3
    assert from_file.disks == from_libvirt.disks
    assert from_file.controllers == from_libvirt.controllers
    assert from_file.metadata == from_libvirt.metadata
    assert from_file.other_drive_units == from_libvirt.other_drive_units
