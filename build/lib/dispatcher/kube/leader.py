"""Leader election on a `coordination.k8s.io/v1` Lease, so only one replica writes.

Built on `kubernetes_asyncio.leaderelection`. Two things are added: every attempt to
acquire or renew is bounded by a timeout (the library's calls have none, and a hung
manager must not let a replica believe it still leads), and a crash of the leading work
ends the election too, so a broken leader never keeps the Lease. `lead()` returns when
leadership is lost (and the work is stopped before it returns, also when cancelled); the
process should then exit and restart as a candidate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)


class _BoundedElection(leaderelection.LeaderElection):
    def __init__(self, config: electionconfig.Config, *, attempt_timeout: float) -> None:
        super().__init__(config)
        self._attempt_timeout = attempt_timeout

    async def try_acquire_or_renew(self) -> bool:
        try:
            async with asyncio.timeout(self._attempt_timeout):
                return await super().try_acquire_or_renew()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("lease attempt failed: %s", error or type(error).__name__)
            return False


async def lead(
    *,
    api: ApiClient,
    namespace: str,
    name: str,
    identity: str,
    lease_duration: int,
    renew_deadline: int,
    retry_period: int,
    work: Callable[[], Awaitable[None]],
    on_leading: Callable[[bool], None],
) -> None:
    """Wait to become leader, run `work` while leading; return when the lease is lost."""
    election_task = asyncio.current_task()
    assert election_task is not None
    work_tasks: list[asyncio.Task[object]] = []

    async def leading() -> None:
        current = asyncio.current_task()
        assert current is not None
        work_tasks.append(current)
        on_leading(True)
        log.info("%s leads (Lease %s/%s)", identity, namespace, name)
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except BaseException:
            log.exception("the leading work failed; giving up the lease")
            election_task.cancel()
            raise

    async def stopped() -> None:
        on_leading(False)
        log.warning("%s lost the lease", identity)

    config = electionconfig.Config(
        LeaseLock(name, namespace, identity, api),
        lease_duration=lease_duration, renew_deadline=renew_deadline,
        retry_period=retry_period, onstarted_leading=leading, onstopped_leading=stopped,
    )
    try:
        await _BoundedElection(config, attempt_timeout=renew_deadline / 2).run()
    finally:
        # The library leaves the leading task running when the election itself is
        # cancelled; a stopped replica must never keep working.
        for task in work_tasks:
            task.cancel()
        if work_tasks:
            await asyncio.wait(work_tasks)
        on_leading(False)
