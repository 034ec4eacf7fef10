"""libvirt's ``<secret>`` object (not the ``<secret>`` reference inside a disk): the XML the host
side defines for QEMU's own initiators (CHAP, cephx). Reference: libvirt's formatsecret."""

from __future__ import annotations

from virtdriver.config.model import Element, attr, child, element, text_child


@element("usage")
class SecretUsage(Element):
    """What the secret is for: ``type`` (``iscsi``, ``ceph``, ...) and its usage name."""

    type: str | None = attr()
    target: str | None = text_child()  # iscsi
    name: str | None = text_child()  # ceph, volume


@element("secret")
class LibvirtSecret(Element):
    """A libvirt secret definition (its value is set separately, never written into XML)."""

    ephemeral: str | None = attr()
    private: str | None = attr()
    uuid: str | None = text_child()
    usage: SecretUsage | None = child(SecretUsage)
