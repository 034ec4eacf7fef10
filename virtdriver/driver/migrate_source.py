"""Live migration on the source: which volumes a guest takes along, releasing them once it left.

:func:`finish_outgoing` is a detach without a device: the host side is released only when no
other guest here uses the volume or its data, and only once the guest has really left (not while
it runs here, not when it is merely shut off here).
"""

from __future__ import annotations

import logging

from virtdriver.driver.compute_host import ComputeHost
from virtdriver.hypervisor.domains import DomainState
from virtdriver.policy.identity import check_instance, check_requested_volume_id
from virtdriver.policy.migration import refuse_finish, refuse_leaving

LOG = logging.getLogger("virtdriver.driver")


def finish_outgoing(host: ComputeHost, instance: str, volume_id: str, *,
                    leftover_definition: bool = False) -> list[str]:
    """After ``instance`` left this (the source) host: release the volume's host side unless
    another guest here uses it. Returns the guests that still do (then nothing is released).

    A guest shut off here has not left: refused, unless ``leftover_definition`` says that only
    its definition stayed behind after a migration moved it."""
    check_requested_volume_id(volume_id)
    check_instance(instance)
    with host.lock([volume_id], [], "finish an outgoing migration"):
        return finish_locked(host, instance, volume_id, leftover_definition)


def finish_locked(host: ComputeHost, instance: str, volume_id: str,
                  leftover_definition: bool = False) -> list[str]:
    """:func:`finish_outgoing` for a caller that holds the volume's lock."""
    states = host.states()
    here = [s for s in states if s.is_instance(instance)]
    refuse_finish(instance, any(s.active for s in here), bool(here), leftover_definition)
    gone = here[0].uuid if here else None
    host.forget_arrivals(volume_id, guest=here[0] if here else instance)  # it is not coming back
    data = next((u.data for s in states for u in s.disks if u.volume == volume_id), None)
    with host.data_locked(data, f"volume {volume_id}", "finish an outgoing migration"):
        users = host.release_unless_used(volume_id, data, gone=gone)
    if users:
        LOG.info("volume %s stays connected on this host: still used by %s", volume_id,
                 ", ".join(users))
    return users


def leaving_volumes(state: DomainState) -> dict[str, str]:
    """The volumes a guest takes along, with their attach modes; refused if one is unsafe."""
    live = [u for u in state.disks if u.live == state.active]
    refuse_leaving(state.name, [u.as_use() for u in live])
    return {u.volume: ("ro" if u.disk.readonly else "rw") for u in live if u.volume}
