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


def status(name: str, n: int) -> str:
    """What libvirt saves of a running domain: its live XML inside ``<domstatus>``, with
    ``<privateData>`` parts of its own (in a disk's source, and of the whole domain)."""
    return (f"<domstatus state='running' pid='1'>\n  <domain type='kvm' id='1'>\n"
            f"    <name>{name}</name><!-- live {n} -->\n    <devices><disk type='file'>"
            "<source file='/x'>\n        <privateData>\n          <nodenames/>\n"
            "        </privateData>\n      </source><privateData/></disk></devices>\n"
            "  </domain>\n  <privateData><qom/></privateData>\n</domstatus>\n")


def live_of(name: str, n: int) -> str:
    """The live XML libvirt returns for what :func:`status` saved (the same document, compared
    without whitespace-only text)."""
    return (f"<domain type='kvm' id='1'>\n    <name>{name}</name><!-- live {n} -->\n"
            "    <devices><disk type='file'><source file='/x'>\n      </source></disk>"
            "</devices>\n  </domain>")


def test_kept_only_while_the_saved_files_are_the_same_and_only_once_trusted(tmp_path) -> None:
    files = Saved(tmp_path)
    cache = XmlCache(files.config, files.state)
    a, b = FakeDom("a"), FakeDom("b")
    files.save("a", "cfg a 0", status("a", 0))
    files.save("b", "cfg b 0", status("b", 0))
    cache.read([listed(a), listed(b)])
    cache.read([listed(a), listed(b)])
    assert (a.reads, b.reads) == (4, 4)  # not trusted yet: read every time
    before = cache.saved(listed(a))
    files.save("a", state=status("a", 1))  # what libvirt does when we hot-plug
    cache.confirm(listed(a), before)
    assert cache.trusted and cache.states_trusted and not cache.definitions_trusted
    # a changed since it was read: its live XML is the file's now, its definition is asked of
    # libvirt (no change of ours was seen in that directory); b: the same bytes -> kept
    xml = {x.listed.name: x for x in cache.read([listed(a), listed(b)])}
    assert _canonical(xml["a"].current) == _canonical(live_of("a", 1)) and (a.reads, b.reads) == (5, 4)
    reads = (a.reads, b.reads)
    cache.read([listed(a), listed(b)])
    assert (a.reads, b.reads) == reads  # nothing new saved: nothing read
    b.config = "<domain><name>b</name><!-- config 1 --></domain>"
    files.save("b", config=b.config)  # a change to b's definition only
    xml = {x.listed.name: x for x in cache.read([listed(a), listed(b)])}
    # its definition asked of libvirt: only a live state of ours was seen changing
    assert xml["b"].config == b.config and _canonical(xml["b"].current) == _canonical(live_of("b", 0))
    assert a.reads == reads[0] and b.reads == reads[1] + 1
    before = cache.saved(listed(a))
    a.config = "<domain><name>a</name><!-- config 1 --></domain>"
    files.save("a", config=a.config)  # what libvirt does when we attach to a's definition
    cache.confirm(listed(a), before)
    assert cache.definitions_trusted and not cache.watching
    b.config = "<domain><name>b</name><!-- config 2 --></domain>"
    files.save("b", config=b.config, state=status("b", 2))
    reads = (a.reads, b.reads)
    xml = {x.listed.name: x for x in cache.read([listed(a), listed(b)])}
    # now both of a domain's XML documents are the files libvirt keeps them in: nothing asked
    assert xml["a"].config == a.config and xml["b"].config == b.config
    assert _canonical(xml["b"].current) == _canonical(live_of("b", 2))
    assert (a.reads, b.reads) == reads
    # b stopped: its flags differ, it has no live state file any more, its definition is all
    (files.state / "b.xml").unlink()
    stopped = cache.read([listed(a), listed(b, active=False)])[1]
    assert stopped.current == b.config and stopped.config is None and b.reads == reads[1]
    # renamed: another name, other files
    files.save("b2", "cfg b 1")
    assert cache.read([listed(a), listed(b, active=False, name="b2")])[1].current == "cfg b 1"
    # a live state file without a domain in it (not libvirt's form): asked of libvirt
    files.save("b", state="<domstatus/>")
    assert cache.read([listed(b, persistent=False)])[0].current == b.live
    assert b.reads == reads[1] + 1


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
    assert cache.definition("a") and not cache.definition("t")
    cache.forget()  # a new connection: perhaps another daemon
    assert not cache.definitions_trusted and cache.watching


def test_the_list_is_kept_until_a_saved_file_comes_or_goes(tmp_path) -> None:
    """Once both directories are trusted, the last list stands while the watch names only
    files of listed domains that are still there (a domain changed); a file that comes (a
    start, a define) or goes (a stop, an undefine, a rename), another connection, or a watch
    that cannot tell, make it again. Before both are trusted, it is made every time -- and
    made while the lock the list's definition() takes is free (no deadlock)."""
    import os

    files = Saved(tmp_path)
    cache = XmlCache(files.config, files.state)
    a = FakeDom("a")
    files.save("a", "cfg", "state")
    made: list[int] = []

    def make() -> list[ListedDomain]:
        made.append(1)
        return [ListedDomain(a, "a", "uuid-a", True, cache.definition("a"))]

    conn = object()
    cache.confirm(listed(a), (b"cfg 0", b"state"))  # only a definition's change seen
    assert cache.definitions_trusted and not cache.states_trusted
    cache.listed(conn, make)
    cache.listed(conn, make)
    assert len(made) == 2
    cache.confirm(listed(a), (b"cfg", b"state 0"))  # and a live state's
    first = cache.listed(conn, make)
    assert cache.listed(conn, make) is first and len(made) == 3
    files.save("a", "cfg 1", "state 1")  # a listed domain changed: the list stands
    tmp = files.state / "a.xml.new"  # ... as libvirt saves it, too
    tmp.write_text("state 2")
    os.replace(tmp, files.state / "a.xml")
    assert cache.listed(conn, make) is first and len(made) == 3
    files.save("b", state="state b")  # a domain started
    second = cache.listed(conn, make)
    assert second is not first and len(made) == 4
    assert cache.listed(conn, make) is second
    (files.state / "b.xml").unlink()  # ... and stopped
    assert cache.listed(conn, make) is not second and len(made) == 5
    files.save("c", "cfg c")  # a domain defined
    cache.listed(conn, make)
    assert len(made) == 6
    (files.state / "a.xml").unlink()  # a listed domain stopped, then started again
    files.save("a", state="state 3")
    cache.listed(conn, make)
    assert len(made) == 7
    cache.listed(object(), make)  # another connection
    assert len(made) == 8
    cache.forget()
    assert not cache.states_trusted


def test_the_same_listing_read_again_sees_every_saved_change(tmp_path) -> None:
    """A long-running driver reads the same kept listing (the same domain objects) over and
    over: a domain whose files the watch named since they were read is read again, the others
    are taken as kept without a look at their files. Random saves (as libvirt writes them: a
    new file renamed over the old), reads in between or not, a watch that cannot tell: every
    read gives what the files hold now."""
    import os
    import random

    files = Saved(tmp_path)
    cache = XmlCache(files.config, files.state)
    doms = [FakeDom(f"d{i}") for i in range(6)]
    version = {d.name: [0, 0] for d in doms}

    def save(dom: FakeDom, which: int) -> None:
        version[dom.name][which] += 1
        n = version[dom.name][which]
        directory, text = ((files.config, f"<domain><name>{dom.name}</name><!-- c{n} -->"
                            "</domain>") if which == 0 else (files.state, status(dom.name, n)))
        new = directory / f"{dom.name}.xml.new"
        new.write_text(text)
        os.replace(new, directory / f"{dom.name}.xml")

    for dom in doms:
        save(dom, 0)
        save(dom, 1)
    listing = [listed(d) for d in doms]
    before = cache.saved(listing[0])
    save(doms[0], 0)
    save(doms[0], 1)
    cache.confirm(listing[0], before)
    assert cache.definitions_trusted and cache.states_trusted
    rng = random.Random(7)
    for step in range(400):
        for _ in range(rng.choice((0, 0, 1, 2))):
            save(rng.choice(doms), rng.randint(0, 1))
        if rng.random() < 0.02:
            cache._watch._watch._torn = True  # the last look ended halfway: it cannot tell
        for xml in cache.read(listing, every=True):
            c, live = version[xml.listed.name]
            assert f"<!-- c{c} -->" in xml.config, step
            assert _canonical(xml.current) == _canonical(live_of(xml.listed.name, live)), step
    assert all(d.reads == 0 for d in doms)  # every XML was the files'


def test_a_live_state_directory_removed_and_made_again_is_watched_again(tmp_path) -> None:
    """libvirt's run directory removed and made again (the daemon restarted on a new /run):
    while it is gone the files are read every time; once it is back a new watch runs, and a
    change made after it is seen."""
    import shutil

    files = Saved(tmp_path)
    cache = XmlCache(files.config, files.state)
    a = FakeDom("a")
    files.save("a", "<domain><name>a</name><!-- c0 --></domain>", status("a", 0))
    listing = [listed(a)]
    cache.confirm(listing[0], (b"before", b"before"))
    assert cache.trusted and cache._watch.running
    cache.read(listing)
    shutil.rmtree(files.state)
    cache.read(listing)  # its live state file gone: asked of libvirt
    assert not cache._watch.running
    reads = a.reads
    files.state.mkdir()
    files.save("a", state=status("a", 1))
    assert _canonical(cache.read(listing)[0].current) == _canonical(live_of("a", 1))
    assert cache._watch.running
    cache.read(listing)
    files.save("a", state=status("a", 2))
    assert _canonical(cache.read(listing)[0].current) == _canonical(live_of("a", 2))
    assert a.reads == reads  # from the files again


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
    """Once the cache is trusted, the host is listed with one call to libvirtd (none while no
    domain came or went), and each domain's flags are libvirt's own: running or not from the list's ids, defined or not from
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
        expected = {persistent.name(): (True, True), transient.name(): (True, False),
                    stopped.name(): (False, True)}
        assert flags() == expected
        assert flags() == expected  # the list is kept: no domain came or went since
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
def test_the_kept_list_is_made_again_when_a_guest_comes_or_goes_elsewhere(
        guests, volume_driver, system_conn, tmp_path, monkeypatch) -> None:
    """Once trusted, the driver lists the host again only when libvirt's saved files show that
    a domain came or went; each such change made by another process (virsh) or another
    connection is seen by the very next decision: a guest started with the data, stopped, a
    definition holding it made and removed. Where nothing came or went, no list is asked for."""
    import subprocess

    from tests.support.volumes import file_volume
    from virtdriver.errors import VolumeInUse

    connection = volume_driver.connection
    if connection.xml is None:
        pytest.skip("this libvirt's saved state is not where the host's QEMU driver keeps it")
    a = guests.start("a")
    warm, data = tmp_path / "warm.raw", tmp_path / "data.raw"
    for path in (warm, data):
        path.write_bytes(b"\0" * 65536)
    volume_driver.attach_volume(file_volume(str(warm), multiattach=True), a.name())
    assert connection.xml.definitions_trusted and connection.xml.states_trusted
    calls: list[int] = []
    real = libvirt.virConnect.listAllDomains

    def counted(self, flags=0):  # noqa: ANN001 - libvirt's own signature
        calls.append(flags)
        return real(self, flags)

    monkeypatch.setattr(libvirt.virConnect, "listAllDomains", counted)
    info = file_volume(str(data), multiattach=False)
    vid = info["data"]["volume_id"]
    assert volume_driver.volume_users(vid) == []  # the first list once trusted: kept
    assert volume_driver.volume_users(vid) == []
    assert calls == [0]  # nothing came or went since
    calls.clear()
    foreign = (f"<disk type='file' device='disk'><driver name='qemu' type='raw'/>"
               f"<source file='{data}'/><target dev='vdc' bus='virtio'/></disk>")
    # another process starts a guest that holds the data
    name = guests.unique_name("other")
    xml = system_conn.lookupByName(a.name()).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    import re

    xml = re.sub(r"<uuid>[^<]*</uuid>", "", xml.replace(f"<name>{a.name()}</name>",
                                                         f"<name>{name}</name>"))
    xml = re.sub(r"<disk type='file' device='disk'>.*?</disk>", "", xml, flags=re.S)
    xml = xml.replace("</devices>", foreign + "</devices>")
    (tmp_path / "other.xml").write_text(xml)
    guests.adopt(name, persistent=False)
    subprocess.run(["virsh", "-q", "-c", "qemu:///system", "create", str(tmp_path / "other.xml")],
                   check=True, capture_output=True)
    with pytest.raises(VolumeInUse, match="under another name"):
        volume_driver.attach_volume(info, a.name())
    assert len(calls) == 1  # it came: listed once
    # ... and stops it: gone for the next decision
    subprocess.run(["virsh", "-q", "-c", "qemu:///system", "destroy", name], check=True,
                   capture_output=True)
    volume_driver.attach_volume(info, a.name())
    volume_driver.detach_volume(a.name(), vid)
    assert len(calls) == 2
    # a definition that holds the data, made by another connection while no guest runs it:
    # a user of it (the host side stays connected); undefined: not any more
    volume_driver.attach_volume(info, a.name())
    defined = system_conn.defineXML(xml)
    guests.adopt(name, persistent=True)
    volume_driver.detach_volume(a.name(), vid)
    assert vid in volume_driver.host.connected()
    defined.undefine()
    assert volume_driver.volume_users(vid) == []
    calls.clear()
    volume_driver.volume_users(vid)
    assert calls == []


def _canonical(xml: str) -> bytes:
    """The document with whitespace-only text left out, in canonical form."""
    from lxml import etree

    root = etree.fromstring(xml.encode())
    for node in root.iter():
        if node.text is not None and not node.text.strip():
            node.text = None
        if node.tail is not None and not node.tail.strip():
            node.tail = None
    return etree.tostring(root, method="c14n")


@pytest.mark.hypervisor
def test_a_running_guests_saved_xml_is_what_libvirt_returns_for_it(
        guests, volume_driver, system_conn, tmp_path) -> None:
    """The XML cache takes a running guest's XML from the files libvirt saves it in (once
    trusted): the definition is what ``XMLDesc(VIR_DOMAIN_XML_INACTIVE)`` returns for every disk
    decision, and the live state's ``<domain>`` is what ``XMLDesc`` returns, the same document
    -- the driver's own disks, one in the definition only, one in the live XML only, a swap
    note's metadata in each."""
    from tests.support.volumes import file_volume
    from virtdriver.config import DomainDisks
    from virtdriver.hypervisor.metadata import NS, parse_notes, set_note
    from virtdriver.hypervisor.xmlcache import CONFIG_DIR, STATE_DIR, saved_live_xml

    guest = guests.start("def")
    images = [tmp_path / f"{n}.raw" for n in ("a", "b", "c", "d")]
    for path in images:
        path.write_bytes(b"\0" * 65536)
    rw = volume_driver.attach_volume(file_volume(str(images[0]), multiattach=True), guest.name())
    volume_driver.attach_volume(file_volume(str(images[1]), multiattach=True), guest.name(),
                                attach_mode="ro")
    guest.attachDeviceFlags(f"<disk type='file' device='disk'><driver name='qemu' type='raw'/>"
                            f"<source file='{images[2]}'/><target dev='vdc' bus='virtio'/>"
                            "</disk>", libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    guest.attachDeviceFlags(f"<disk type='file' device='disk'><driver name='qemu' type='raw'/>"
                            f"<source file='{images[3]}'/><target dev='sdd' bus='scsi'/>"
                            "<readonly/></disk>", libvirt.VIR_DOMAIN_AFFECT_LIVE)
    for live in (False, True):
        set_note(guest, f"ua-{rw.volumeId}", "5b1e0c3a-7f2d-4e8b-9a61-3c4d5e6f7a8b",
                 f"file|{images[0]}", live=live, persistent=not live)
    saved = (CONFIG_DIR / f"{guest.name()}.xml").read_text()
    returned = guest.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    from_file, from_libvirt = DomainDisks.from_xml(saved), DomainDisks.from_xml(returned)
    assert len(from_file.disks) == 3
    assert from_file.disks == from_libvirt.disks
    assert from_file.controllers == from_libvirt.controllers
    assert from_file.metadata == from_libvirt.metadata
    assert from_file.other_drive_units == from_libvirt.other_drive_units
    live = saved_live_xml((STATE_DIR / f"{guest.name()}.xml").read_bytes())
    assert live is not None
    from_file, from_libvirt = DomainDisks.from_xml(live), DomainDisks.from_xml(guest.XMLDesc(0))
    assert len(from_file.disks) == 3
    assert from_file.disks == from_libvirt.disks
    assert from_file.controllers == from_libvirt.controllers
    # the notes read the same (the saved text is indented one level deeper)
    notes = parse_notes(from_file.metadata.get(NS))
    assert notes and notes == parse_notes(from_libvirt.metadata.get(NS))
    assert from_file.other_drive_units == from_libvirt.other_drive_units
    # the whole document: libvirt saves its live state with the secure parts
    assert _canonical(live) == _canonical(guest.XMLDesc(libvirt.VIR_DOMAIN_XML_SECURE))
