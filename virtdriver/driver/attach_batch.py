"""One guest's attach: attaches of one volume that wait for its lock together are done as one.

Many callers asking at once for one multiattach volume (a compute host starting many instances
that share it) would otherwise take its lock in turn, each reading every guest again. Those that
wait together are attached as one attach to many (:mod:`virtdriver.driver.batches`): one read of
the host, one decision, one connect, parallel attaches. If that fails it is undone as a whole,
and each is then attached alone, in turn, so every caller gets the outcome it would have had.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from virtdriver.attachment import Attachment
from virtdriver.driver.attach import (
    Attached,
    Placement,
    attach_locked,
    attach_prepared,
    locked,
    prepare,
)
from virtdriver.driver.compute_host import ComputeHost
from virtdriver.secrets import redact, secret_values

LOG = logging.getLogger(__name__)


def attach_one(host: ComputeHost, connection_info: Mapping[str, Any], instance: str,
               placement: Placement, *, allow_shared_write: bool = False,
               writers_elsewhere: Sequence[str] = ()) -> Attachment:
    """Attach a volume to one guest (``writers_elsewhere``: its writers on other hosts).

    Attaches of one multiattach volume that wait for its lock at the same time are done
    together, as an attach to many: one read of the host, one connect, parallel attaches. If
    that fails, each is then done alone, in turn, so every caller gets its own outcome.
    """
    asked_at = time.monotonic_ns()
    request = prepare(host, connection_info, [instance])
    known = request.data_before_connect()
    if not request.multiattach:  # a second guest is refused anyway: nothing to share
        return attach_prepared(host, request, known, [instance], [placement],
                               asked_at=asked_at, allow_shared_write=allow_shared_write,
                               writers_elsewhere=writers_elsewhere)[0]

    def run(take: Callable[[], list[tuple[str, Placement]]]) -> list[Attachment | BaseException]:
        with locked(host, request, known) as held:
            batch = take()
            asked_at = time.monotonic_ns()  # every member has asked by now
            together: Attached | None = None
            if len(batch) > 1:
                LOG.debug("volume %s: %d attaches waited together; attaching them as one",
                          request.vid, len(batch))
                try:
                    together = attach_locked(host, held, request, known, [i for i, _ in batch],
                                             [p for _, p in batch], asked_at=asked_at,
                                             allow_shared_write=allow_shared_write,
                                             writers_elsewhere=writers_elsewhere)
                except Exception as exc:  # noqa: BLE001 - undone; each is tried alone below
                    LOG.debug("volume %s: attaching %d together failed (%s); each in turn",
                              request.vid, len(batch),
                              redact(str(exc), secret_values(request.info)))
            alone: list[Attached | BaseException] = []
            if together is None:
                for instance_, placement_ in batch:
                    try:
                        alone.append(attach_locked(host, held, request, known, [instance_],
                                                   [placement_], asked_at=asked_at,
                                                   allow_shared_write=allow_shared_write,
                                                   writers_elsewhere=writers_elsewhere))
                    except Exception as exc:  # noqa: BLE001 - this caller's own outcome
                        alone.append(exc)
        if together is not None:  # the overrides are noted once the locks are released
            return list(together.finish(None))
        return [o if isinstance(o, BaseException) else o.finish(None)[0] for o in alone]

    key = (request.vid, allow_shared_write, tuple(sorted(writers_elsewhere)),
           json.dumps(request.info, sort_keys=True, default=str))
    return host.attach_batches.submit(key, (instance, placement), run)
