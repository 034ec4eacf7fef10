"""Reading a domain's XML from libvirt again only when libvirt changed it.

Every attach and detach reads every domain on the host (the list, then each domain's live and
persistent XML): the sharing and "still used" decisions are taken from libvirt's own state, not a
database of ours. The list is one or two calls; the XML is two calls per running guest, the part
that grows with the guests. This module keeps the XML of each domain between operations and reads it
again only when libvirt may have changed it.

How that is known: libvirt's QEMU driver saves every change it makes to a domain before the call
that made it returns -- the persistent definition to ``<config dir>/<name>.xml``, the live one
(with its runtime state) to ``<state dir>/<name>.xml`` -- because that is what it reloads after a
daemon restart; whoever made the change (this process, another virtdriver, nova, virsh) and
whatever it was (a hot-plug, a removal the guest finished, a change to the definition alone, a
block job, a start, a stop). So a domain whose two saved files hold the same bytes as when its XML
was last read has the same XML: the cache is keyed by those bytes (the file contents, not their
timestamps), read *before* the XML, with the domain's name and its running/defined flags.

It is used only where it can be trusted:

- for ``qemu:///system`` (the directories of the host's own QEMU driver), with both
  directories present;
- once this process has seen its own change to a guest reach those files (``confirm``): files
  that do not change with libvirt's state (another mount namespace, another daemon) would
  otherwise hide changes, so until then, and for good if one of its changes did not show, every
  domain is read from libvirt as before;
- per domain only when the files it must have (the definition of a persistent domain, the state
  of a running one) are readable.

A domain the cache answers for costs two small file reads instead of two calls to libvirtd. One
it cannot answer for (libvirt saved something new of it) costs no call either, once a change of
this process's was seen in each of the two directories itself: its XML is what the files just
read hold. Their bytes are the key, so the XML and its key can never disagree; and what the
files hold is what libvirt returns -- the definition's file is what it
returns for ``VIR_DOMAIN_XML_INACTIVE`` (with a header comment and the secure parts such as a VNC
password, which no disk decision reads), the live state's file holds the live XML as
``<domstatus><domain>`` (with ``<privateData>`` parts of libvirt's own, left out when read).
tests/test_xmlcache.py compares both with what libvirt returns on a real guest. Before the
files are trusted, or when one cannot be read, the XML is asked of libvirt.

The same files halve the lists: once a change of this process's was seen in the definitions'
directory too, the host is listed in one call (every domain, each with its id, ``-1`` when it
does not run), and a running domain is defined exactly when its definition's file is there
(:meth:`XmlCache.definition`) -- the rule libvirtd itself applies when it starts and finds the
domains it left running.

The watch: reading every domain's two files still grows with the guests. libvirt saves a file by
writing ``<name>.xml.new`` and renaming it over ``<name>.xml``, and removes it with an unlink; the
kernel queues an inotify event for either before the call returns
(:mod:`~virtdriver.hypervisor.filewatch`). So a file the watch on the two directories has not
named since it was read holds what was read: it is not read again, and a domain of the kept
list whose two files it has not named is not even looked at. A change made under a lock
this process then takes (another process's attach to the same data) reached the file, and so the
queue, before that lock was released, and the queue is drained after the lock is taken: the read
sees it. And the list: a domain starts, stops, is defined, undefined or renamed only with a file
that comes or goes in one of the two directories; while none did (a file named that is not a
listed domain's, or was removed or renamed away), the last list still holds and libvirtd is not
asked. When the watch cannot tell (its queue overflowed, a directory went, the process forked),
everything is read and listed again; a directory that went is watched again once it is back.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import libvirt

from virtdriver.hostfiles import read_bytes
from virtdriver.hypervisor.domains import DomainXml, ListedDomain
from virtdriver.hypervisor.filewatch import LazyWatch

SYSTEM_URI = "qemu:///system"
CONFIG_DIR = Path("/etc/libvirt/qemu")
STATE_DIR = Path("/run/libvirt/qemu")

Saved = tuple[bytes | None, bytes | None]  # the definition's and the live state's saved bytes


class XmlCache:
    """The XML of the domains of one libvirt connection, kept while libvirt's saved copies of
    it are unchanged (see the module's description)."""

    def __init__(self, config_dir: Path = CONFIG_DIR, state_dir: Path = STATE_DIR) -> None:
        self.config_dir = config_dir
        self.state_dir = state_dir
        self._config = f"{config_dir}/"  # file names joined as text: no Path per domain
        self._state = f"{state_dir}/"
        self.usable = config_dir.is_dir() and state_dir.is_dir()
        self.trusted = False  # set by confirm(): our own change was seen in the files
        self.definitions_seen = False  # ... and one of them in a definition's file
        self.states_seen = False  # ... and one of them in a live state's file
        self._refused = False  # a change of ours did not show: never trusted again
        self._lock = threading.Lock()
        # Each domain's XML by UUID, with its key and the drain count its files were read at.
        self._kept: dict[str, tuple[tuple[str, bool, bool, Saved], DomainXml, int]] = {}
        # The saved files read since the watch was last drained without naming them (by path):
        # they hold what was read (see "The watch" in the module's description).
        self._files: dict[str, bytes] = {}
        self._drains = 0  # drains of the watch that named a file: a read across one is not kept
        self._named: dict[str, int] = {}  # domain name -> the drain that last named its files
        self._dropped = 0  # the drain count when everything was last dropped
        # The last list of the host, with the names it gave a definition's and a live state's
        # file, while the watch has named no file that came or went since it was made.
        self._listing: tuple[object, list[ListedDomain], frozenset[str], frozenset[str]] | None
        self._listing = None
        self._listings = 0  # lists dropped: a list made across a drop is not kept
        # started once trusted (confirm): a one-shot command (virtdriver list) never needs it
        self._watch = LazyWatch([config_dir, state_dir])

    @classmethod
    def for_uri(cls, uri: str) -> XmlCache | None:
        cache = cls() if uri == SYSTEM_URI else None
        return cache if cache is not None and cache.usable else None

    # ---- the watch ------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Take in what the watch names (the caller holds the lock): the files it names are read
        again, and a file that came or went drops the list. Everything, when it cannot tell."""
        changes = self._watch.changes()
        if changes is None:
            self._drop_all()
            return
        if not changes:
            return
        try:
            self._take(changes)
        except BaseException:  # (an interrupt) what was taken from the queue is lost
            self._drop_all()
            raise

    def _take(self, changes: dict[str, dict[str, bool]]) -> None:
        self._drains += 1
        drains, named = self._drains, self._named
        listing = self._listing
        for directory, names in changes.items():
            is_config = directory == str(self.config_dir)
            prefix = self._config if is_config else self._state
            for name, removed in names.items():
                if not name.endswith(".xml"):
                    continue  # libvirt's temporary files and others: a save ends in a rename
                self._files.pop(prefix + name, None)
                named[name[:-4]] = drains
                if listing is None:
                    continue
                known = listing[2] if is_config else listing[3]
                if removed or name[:-4] not in known:  # a domain came, went, or changed
                    listing = None
        if listing is None and self._listing is not None:
            self._listing = None
            self._listings += 1
        if len(named) > 4 * len(self._kept) + 1024:  # the names of domains long gone: a
            self._drop_all()  # new start (one read of every file) forgets them

    def _start_watch(self) -> None:
        """Watch the two directories from now on (the caller holds the lock); nothing read
        before is kept (:meth:`_file` keeps only what is read while the watch runs)."""
        if not self._watch.running and self.usable and self._watch.start():
            self._drop_all()

    def _drop_all(self) -> None:
        self._files.clear()
        self._drains += 1
        # Set before what was named is forgotten: a reader looks at a name, then at this.
        self._dropped = self._drains
        self._named.clear()
        self._listing = None
        self._listings += 1

    def _file(self, path: str, drains: int) -> bytes:
        """A saved file's bytes: as read before, if the watch has not named it since; else read
        now (and kept if no drain came between ``drains``, the count the caller took, and now)."""
        found = self._files.get(path)
        if found is not None:
            return found
        data = read_bytes(path)
        if self._watch.running:
            with self._lock:
                if self._drains == drains:
                    self._files[path] = data
        return data

    # ---- the list -------------------------------------------------------------------------------

    def listed(self, conn: object, make: Callable[[], list[ListedDomain]]
               ) -> list[ListedDomain]:
        """The host's list of domains: the last one made on ``conn``, while the watch names no
        definition or live state file that came or went since (a start, a stop, a define, an
        undefine, a rename each add or remove one before the call that made it returns); else
        ``make()``'s. Only once both directories are trusted (:attr:`definitions_trusted`,
        :attr:`states_trusted`)."""
        with self._lock:
            self._drain()  # before make(): definition() takes files the watch has not named
            keep = (self.definitions_trusted and self.states_trusted
                    and self._watch.running)
            listing = self._listing
            if keep and listing is not None and listing[0] is conn:
                return listing[1]
            listings = self._listings
        made = make()
        with self._lock:
            if keep and self._listings == listings:
                self._listing = (conn, made, frozenset(d.name for d in made if d.persistent),
                                 frozenset(d.name for d in made if d.active))
        return made

    def saved(self, listed: ListedDomain) -> Saved | None:
        """What libvirt saved of this domain: its definition (persistent domains) and its live
        state (running ones); ``None`` when a file it must have cannot be read."""
        with self._lock:
            self._drain()
            drains = self._drains
        return self._saved(listed, drains)

    def _saved(self, listed: ListedDomain, drains: int) -> Saved | None:
        try:
            config = (self._file(f"{self._config}{listed.name}.xml", drains)
                      if listed.persistent else None)
            state = (self._file(f"{self._state}{listed.name}.xml", drains) if listed.active
                     else None)
        except OSError:
            return None
        return config, state

    def definition(self, name: str) -> bool:
        """Whether libvirt keeps a definition of the domain ``name``: its definition's file is
        there. libvirt writes that file before a define returns and removes it before an
        undefine does, and when the daemon starts, a running domain is persistent exactly when
        that file is there; so the file says what libvirt's flag says. (Read, not only looked
        for: the cache's key needs the bytes next, kept while the watch does not name them.)"""
        path = f"{self._config}{name}.xml"
        with self._lock:
            drains = self._drains  # the list that asks drained the watch just before
        try:
            self._file(path, drains)
            return True
        except FileNotFoundError:
            return False
        except OSError:
            return os.path.lexists(path)

    @property
    def definitions_trusted(self) -> bool:
        """Whether libvirt's definition files may stand in for libvirt itself -- for its list of
        defined domains (:meth:`definition`) and for a running domain's definition (:meth:`read`):
        only once the files are trusted (:meth:`confirm`) and a change of this process's to a
        definition was seen in the definitions' directory itself."""
        return self.trusted and self.definitions_seen and not self._refused

    @property
    def states_trusted(self) -> bool:
        """Whether libvirt's live-state files may stand in for its live XML (:meth:`read`):
        only once the files are trusted and a change of this process's to a running domain was
        seen in the live states' directory itself."""
        return self.trusted and self.states_seen and not self._refused

    def read(self, listed: Iterable[ListedDomain], *, every: bool = False) -> list[DomainXml]:
        """Each listed domain's XML: kept, when libvirt saved nothing new of it since it was read
        (and the cache is trusted), else read again -- from the files just read once they are
        trusted, else from libvirt. A domain that vanished meanwhile is left out. ``every``:
        these are all the host's domains (the others are forgotten)."""
        found: list[DomainXml] = []
        seen = set()
        with self._lock:
            self._drain()
            drains = self._drains
            trusted = self.trusted
            definitions, states = self.definitions_trusted, self.states_trusted
            watched = trusted and self._watch.running
        refused = self._refused
        kept_xml, named = self._kept, self._named
        for domain in listed:
            seen.add(domain.uuid)
            kept = kept_xml.get(domain.uuid)
            # Listed as when it was kept (the same listing), its files read with the watch
            # running and not named since: what was kept holds, and nothing is read. (The name
            # before the drop count: a drop sets the count, then forgets the names.)
            if (watched and kept is not None and kept[1].listed is domain
                    and named.get(domain.name, 0) <= kept[2] and kept[2] >= self._dropped):
                found.append(kept[1])
                continue
            saved = self._saved(domain, drains) if not refused else None
            key = (domain.name, domain.active, domain.persistent, saved)
            if saved is not None and trusted and kept is not None and kept[0] == key:
                xml = kept[1]
                if xml.listed is not domain:  # listed again: the same domain, a new handle
                    xml = DomainXml(domain, xml.current, xml.config)
                with self._lock:
                    self._kept[domain.uuid] = (key, xml, drains)
                found.append(xml)
                continue
            # What the files hold is the XML, once trusted (see the module's description): the
            # definition once a change of ours was seen in its directory, the live XML once one
            # was seen in the live state's. What they cannot give is asked of libvirt.
            definition = live = None
            if saved is not None:
                if states and saved[1] is not None:
                    live = saved_live_xml(saved[1])
                if definitions and saved[0] is not None:
                    definition = _text(saved[0])
            try:
                xml = domain.read(definition, live)  # asked after the files: a change shows
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
                continue
            with self._lock:
                if saved is None:
                    self._kept.pop(domain.uuid, None)
                else:
                    self._kept[domain.uuid] = (key, xml, drains)
            found.append(xml)
        if every:
            with self._lock:
                for uuid in [u for u in self._kept if u not in seen]:
                    del self._kept[uuid]
        return found

    @property
    def watching(self) -> bool:
        """True until a change of this process's was seen in both directories' files (or one
        was not seen at all)."""
        return not (self.trusted and self.definitions_seen and self.states_seen) \
            and not self._refused

    def confirm(self, listed: ListedDomain, before: Saved | None) -> None:
        """After this process changed ``listed`` (a hot-plug, a removal, a definition change):
        the saved files must show it. They do: the cache can be trusted. They do not: they are
        not this libvirt's, and the cache is never used again."""
        if before is None or self._refused:
            return
        after = self.saved(listed)
        with self._lock:
            if after is None:
                return
            if after == before:
                self._refused = True
                self.trusted = False
                self._kept.clear()
                self._drop_all()
            else:
                self.trusted = True
                self._start_watch()
                if before[0] is not None and after[0] != before[0]:
                    self.definitions_seen = True
                if before[1] is not None and after[1] != before[1]:
                    self.states_seen = True

    def forget(self) -> None:
        """Drop everything kept and the trust (a new connection: perhaps another daemon)."""
        with self._lock:
            self._kept.clear()
            self._drop_all()
            self.trusted = self.definitions_seen = self.states_seen = False


# (no leading whitespace in the pattern: a pattern that starts with a literal is searched for
# quickly; the blank text left in its place means nothing in a domain's XML)
_PRIVATE = re.compile(r"<privateData\b(?:[^>]*/>|.*?</privateData>)", re.S)


def saved_live_xml(saved: bytes) -> str | None:
    """The live XML in libvirt's saved live state (``None`` when it is not there): the
    ``<domain>`` inside ``<domstatus>``, without the ``<privateData>`` parts (QEMU node names,
    QOM paths) that libvirt keeps there for itself and leaves out of the XML it returns."""
    text = _text(saved)
    if text is None:
        return None
    start, end = text.find("<domain "), text.rfind("</domain>")
    if start < 0 or end < start:
        return None
    domain = text[start:end + len("</domain>")]
    return _PRIVATE.sub("", domain) if "<privateData" in domain else domain


def _text(saved: bytes) -> str | None:
    """A saved definition as text (``None``, so that libvirt is asked, if it is not UTF-8)."""
    try:
        return saved.decode("utf-8")
    except UnicodeDecodeError:
        return None
