"""A declarative model of libvirt's ``<disk>`` XML. No policy lives here."""

from virtdriver.config.disk import (
    IQN,
    Address,
    Alias,
    Auth,
    BlockIO,
    Boot,
    Disk,
    Driver,
    Encryption,
    Host,
    Initiator,
    IoTune,
    Reservations,
    ReservationsSource,
    SecLabel,
    Secret,
    Source,
    Target,
)
from virtdriver.config.domain import DomainDisks
from virtdriver.config.model import Element, Unknown, declared_fields

__all__ = [
    "IQN", "Address", "Alias", "Auth", "BlockIO", "Boot", "Disk", "DomainDisks", "Driver",
    "Element", "Encryption", "Host", "Initiator", "IoTune", "Reservations", "ReservationsSource",
    "SecLabel", "Secret", "Source", "Target", "Unknown", "declared_fields",
]
