"""The libvirt ``<disk>`` element and everything inside it.

One class per element; field order is element order. The classes hold values only: what a volume
should look like (read-only, shareable, cache mode, labels) is decided in :mod:`virtdriver.policy`.
Reference: libvirt's formatdomain documentation, "Hard drives, floppy disks, CDROMs".
"""

from __future__ import annotations

from virtdriver.config.model import INT, Element, attr, child, children, element, flag, text_child


@element("secret")
class Secret(Element):
    """``<secret>`` inside ``<auth>`` (type ``ceph``/``iscsi``) or ``<encryption>``."""

    type: str | None = attr()
    uuid: str | None = attr()
    usage: str | None = attr()


@element("auth")
class Auth(Element):
    """Credentials for a network source; libvirt accepts it inside or beside ``<source>``."""

    username: str | None = attr()
    secret: Secret | None = child(Secret)


@element("encryption")
class Encryption(Element):
    """An encryption layer handled by QEMU, e.g. ``format='luks'`` with a passphrase secret."""

    format: str | None = attr()
    secret: Secret | None = child(Secret)


@element("host")
class Host(Element):
    """One server of a network source."""

    name: str | None = attr()
    port: int | None = attr(conv=INT)
    transport: str | None = attr()
    socket: str | None = attr()


@element("seclabel")
class SecLabel(Element):
    """A per-disk security label override for one security model (``selinux``, ``dac``)."""

    model: str | None = attr()
    relabel: str | None = attr()
    labelskip: str | None = attr()
    label: str | None = text_child()


@element("source")
class ReservationsSource(Element):
    """The socket of the persistent-reservation helper."""

    type: str | None = attr()
    path: str | None = attr()
    mode: str | None = attr()


@element("reservations")
class Reservations(Element):
    """SCSI persistent reservations for a ``device='lun'`` disk."""

    managed: str | None = attr()
    source: ReservationsSource | None = child(ReservationsSource)


@element("iqn")
class IQN(Element):
    """The initiator name QEMU uses for a native iSCSI source."""

    name: str | None = attr()


@element("initiator")
class Initiator(Element):
    iqn: IQN | None = child(IQN)


@element("source")
class Source(Element):
    """Where the disk's data lives: a file, a block device, a directory or a network volume."""

    file: str | None = attr()
    dev: str | None = attr()
    dir: str | None = attr()
    protocol: str | None = attr()
    name: str | None = attr()
    pool: str | None = attr()
    volume: str | None = attr()
    mode: str | None = attr()
    startup_policy: str | None = attr("startupPolicy")
    index: int | None = attr(conv=INT)
    hosts: list[Host] = children(Host)
    auth: Auth | None = child(Auth)
    encryption: Encryption | None = child(Encryption)
    seclabels: list[SecLabel] = children(SecLabel)
    reservations: Reservations | None = child(Reservations)
    initiator: Initiator | None = child(Initiator)


@element("driver")
class Driver(Element):
    """How QEMU opens the disk: format, caching, I/O mode and error handling."""

    name: str | None = attr()
    type: str | None = attr()
    cache: str | None = attr()
    io: str | None = attr()
    error_policy: str | None = attr()
    rerror_policy: str | None = attr()
    iothread: int | None = attr(conv=INT)
    queues: int | None = attr(conv=INT)
    copy_on_read: str | None = attr()
    discard: str | None = attr()
    detect_zeroes: str | None = attr()


@element("target")
class Target(Element):
    """The device name and bus the guest sees."""

    dev: str | None = attr()
    bus: str | None = attr()
    tray: str | None = attr()
    removable: str | None = attr()


@element("iotune")
class IoTune(Element):
    """Throttling limits (bytes or operations per second, bursts, burst lengths, groups)."""

    total_bytes_sec: int | None = text_child(conv=INT)
    read_bytes_sec: int | None = text_child(conv=INT)
    write_bytes_sec: int | None = text_child(conv=INT)
    total_iops_sec: int | None = text_child(conv=INT)
    read_iops_sec: int | None = text_child(conv=INT)
    write_iops_sec: int | None = text_child(conv=INT)
    total_bytes_sec_max: int | None = text_child(conv=INT)
    read_bytes_sec_max: int | None = text_child(conv=INT)
    write_bytes_sec_max: int | None = text_child(conv=INT)
    total_iops_sec_max: int | None = text_child(conv=INT)
    read_iops_sec_max: int | None = text_child(conv=INT)
    write_iops_sec_max: int | None = text_child(conv=INT)
    size_iops_sec: int | None = text_child(conv=INT)
    group_name: str | None = text_child()
    total_bytes_sec_max_length: int | None = text_child(conv=INT)
    read_bytes_sec_max_length: int | None = text_child(conv=INT)
    write_bytes_sec_max_length: int | None = text_child(conv=INT)
    total_iops_sec_max_length: int | None = text_child(conv=INT)
    read_iops_sec_max_length: int | None = text_child(conv=INT)
    write_iops_sec_max_length: int | None = text_child(conv=INT)


@element("blockio")
class BlockIO(Element):
    """Block sizes the guest sees."""

    logical_block_size: int | None = attr(conv=INT)
    physical_block_size: int | None = attr(conv=INT)


@element("boot")
class Boot(Element):
    order: int | None = attr(conv=INT)


@element("alias")
class Alias(Element):
    """The device alias; a ``ua-`` prefix marks an alias chosen by the user."""

    name: str | None = attr()


@element("address")
class Address(Element):
    """Where the device sits: ``type='drive'`` (controller/bus/target/unit) or ``type='pci'``.

    Values are kept as written (PCI addresses are hexadecimal strings such as ``0x05``).
    """

    type: str | None = attr()
    domain: str | None = attr()
    controller: str | None = attr()
    bus: str | None = attr()
    target: str | None = attr()
    slot: str | None = attr()
    unit: str | None = attr()
    function: str | None = attr()
    multifunction: str | None = attr()

    @classmethod
    def drive(cls, unit: int, *, controller: int = 0, bus: int = 0, target: int = 0) -> Address:
        """A drive address on a SCSI/SATA/IDE controller."""
        return cls(type="drive", controller=str(controller), bus=str(bus), target=str(target),
                   unit=str(unit))


@element("disk")
class Disk(Element):
    """A libvirt ``<disk>`` device."""

    type: str | None = attr()
    device: str | None = attr()
    sgio: str | None = attr()
    rawio: str | None = attr()
    snapshot: str | None = attr()
    driver: Driver | None = child(Driver)
    auth: Auth | None = child(Auth)
    source: Source | None = child(Source)
    blockio: BlockIO | None = child(BlockIO)
    target: Target | None = child(Target)
    iotune: IoTune | None = child(IoTune)
    readonly: bool = flag()
    shareable: bool = flag()
    transient: bool = flag()
    serial: str | None = text_child()
    wwn: str | None = text_child()
    vendor: str | None = text_child()
    product: str | None = text_child()
    encryption: Encryption | None = child(Encryption)
    boot: Boot | None = child(Boot)
    alias: Alias | None = child(Alias)
    address: Address | None = child(Address)
