"""Validation of a lone ``<disk>`` against libvirt's own RelaxNG schema.

libvirt's ``domain.rng`` starts at ``<domain>``; a small grammar whose start is libvirt's ``disk``
definition (with the overrides ``domain.rng`` itself uses) validates one disk and names it in its
errors.
"""

from __future__ import annotations

import functools
from pathlib import Path

from lxml import etree

from virtdriver.errors import ConfigError

SCHEMA_DIR = Path("/usr/share/libvirt/schemas")

_DISK_GRAMMAR = """<grammar xmlns="http://relaxng.org/ns/structure/1.0"
         datatypeLibrary="http://www.w3.org/2001/XMLSchema-datatypes">
  <start><ref name="disk"/></start>
  <include href="{href}"/>
</grammar>"""


class SchemaUnavailable(ConfigError):
    """libvirt's RelaxNG schemas are not installed on this host."""


class SchemaViolation(ConfigError):
    """The XML does not validate against libvirt's schema."""


@functools.cache
def disk_schema(schema_dir: Path = SCHEMA_DIR) -> etree.RelaxNG:
    """The compiled grammar for a lone ``<disk>`` (compiled once per process)."""
    overrides = schema_dir / "domainoverrides.rng"
    if not overrides.exists():
        raise SchemaUnavailable(f"libvirt's schemas are not installed ({overrides} is missing)")
    grammar = etree.fromstring(_DISK_GRAMMAR.format(href=overrides.as_uri()).encode(),
                               base_url=overrides.as_uri())
    return etree.RelaxNG(grammar)


def validate_disk(xml: str) -> None:
    """Raise :class:`SchemaViolation` with libvirt's schema message if ``xml`` is not valid."""
    schema = disk_schema()
    try:
        schema.assertValid(etree.fromstring(xml.encode()))
    except etree.DocumentInvalid as exc:
        raise SchemaViolation(f"disk XML is not valid for libvirt: {exc}") from None
