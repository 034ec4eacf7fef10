"""The attach policy: every rule that decides how a volume may be used, in one package.

- :mod:`~virtdriver.policy.attach` — one disk: attach mode, read-only, ``<shareable/>``,
  ``cache``/``io``, labels, and the refusals of unsafe combinations;
- :mod:`~virtdriver.policy.sharing` — the host: who may share a volume's data (a second user of a
  non-multiattach volume, the same data under another id, fan-out), and the dangers ``audit``
  reports;
- :mod:`~virtdriver.policy.filesystems` — a second writer only on a cluster filesystem;
- :mod:`~virtdriver.policy.swap` — what a swap may do: never copy over data a guest uses, never
  widen read-only, never from a volume others write, only between equal sizes;
- :mod:`~virtdriver.policy.identity` — what a volume id may be and how it is carried in a
  libvirt user alias;
- :mod:`~virtdriver.policy.migration` and :mod:`~virtdriver.policy.carryover` — live migration:
  which disks may leave, an arriving guest as a user, where the guest is after libvirt's call,
  and what a disk keeps or must agree on when it arrives.

All are pure functions: they read what they are given and raise a
:class:`~virtdriver.errors.PolicyRefusal` (or an :class:`~virtdriver.errors.InputError`) that says
why. "Where is the rule that refused this?" is answered in this folder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from virtdriver.policy.attach import (
        ATTACH_MODES,
        LABEL_POLICIES,
        RELABEL_MODELS,
        THROTTLE_MAX,
        apply_policy,
        check_attach_mode,
        check_block_device_attach_mode,
        check_block_sizes,
        check_hotplug_bus,
        check_label_options,
        check_label_policy,
        check_option_flag,
        check_option_text,
        check_throttle,
        effective_attach_mode,
        fitting_serial,
        shared_image_label,
    )
    from virtdriver.policy.sharing import DIRECT_CACHE_MODES

__all__ = [
    "ATTACH_MODES",
    "DIRECT_CACHE_MODES",
    "LABEL_POLICIES",
    "THROTTLE_MAX",
    "RELABEL_MODELS",
    "apply_policy",
    "check_attach_mode",
    "check_block_device_attach_mode",
    "check_block_sizes",
    "fitting_serial",
    "check_hotplug_bus",
    "check_label_options",
    "check_label_policy",
    "check_option_flag",
    "check_option_text",
    "check_throttle",
    "effective_attach_mode",
    "shared_image_label",
]


def __getattr__(name: str) -> object:
    # Imported on first use: reading the host (sharing, identity) does not need the rules of
    # one disk (attach), and a command's start pays only for what it uses.
    if name not in __all__:
        raise AttributeError(f"module 'virtdriver.policy' has no attribute {name!r}")
    if name == "DIRECT_CACHE_MODES":
        from virtdriver.policy import sharing as module
    else:
        from virtdriver.policy import attach as module  # type: ignore[no-redef]
    value = getattr(module, name)
    globals()[name] = value
    return value
