"""Leader election (`kube.leader.lead`) over a fake Lease on a fake clock: the library's
own clock and sleeps are pointed at the fake one, the Lease lives in a dict that tests
can take over, fail or hang. A replica that cannot renew stops its work before `lead`
returns; a crash of the work gives the Lease up; a hung renewal counts as a failure."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection import leaderelection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord

from devkit.fakeclock import FakeClock, settle
from dispatcher.kube import leader


class LeaseStore:
    """The API server's Lease: the record, and what the next calls do."""

    def __init__(self) -> None:
        self.record: LeaderElectionRecord | None = None
        self.fail_updates = False
        self.hang = False


def lock_class(store: LeaseStore) -> Callable[..., Any]:
    class FakeLeaseLock:
        def __init__(self, name: str, namespace: str, identity: str, api: Any) -> None:
            self.name, self.namespace, self.identity = name, namespace, identity

        async def _maybe_hang(self) -> None:
            if store.hang:
                await asyncio.Event().wait()

        async def get(self, name: str, namespace: str) -> tuple[bool, Any]:
            await self._maybe_hang()
            if store.record is None:
                error = ApiException(status=404, reason="Not Found")
                error.body = '{"code": 404}'  # type: ignore[assignment]
                return False, error
            return True, LeaderElectionRecord(**vars(store.record))

        async def create(self, name: str, namespace: str,
                         election_record: LeaderElectionRecord) -> bool:
            store.record = election_record
            return True

        async def update(self, name: str, namespace: str,
                         updated_record: LeaderElectionRecord) -> bool:
            await self._maybe_hang()
            if store.fail_updates:
                return False
            store.record = updated_record
            return True
    return FakeLeaseLock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setattr(leaderelection, "time", types.SimpleNamespace(time=clock.time))
    monkeypatch.setattr(leaderelection, "asyncio", types.SimpleNamespace(
        sleep=clock.sleep, create_task=asyncio.create_task))
    return clock


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> LeaseStore:
    store = LeaseStore()
    monkeypatch.setattr(leader, "LeaseLock", lock_class(store))
    return store


class Replica:
    def __init__(self, work: Callable[[], Any] | None = None) -> None:
        self.leading: list[bool] = []
        self.work_started = asyncio.Event()
        self.work_cancelled = False
        self._work = work

    async def work(self) -> None:
        self.work_started.set()
        try:
            if self._work is not None:
                await self._work()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.work_cancelled = True
            raise

    def lead(self, identity: str = "me") -> asyncio.Task[None]:
        return asyncio.create_task(leader.lead(
            api=None, namespace="ns", name="lease", identity=identity,  # type: ignore[arg-type]
            lease_duration=15, renew_deadline=10, retry_period=2, work=self.work,
            on_leading=self.leading.append))


async def test_a_replica_that_cannot_renew_stops_its_work_before_returning(
        clock: FakeClock, store: LeaseStore) -> None:
    replica = Replica()
    election = replica.lead()
    await settle()
    assert replica.work_started.is_set() and replica.leading == [True]
    await clock.advance(6)                      # renewing every 2 s
    assert store.record is not None and store.record.holder_identity == "me"
    assert not election.done()

    store.fail_updates = True                   # e.g. RBAC lost, or the manager refuses
    for _ in range(8):
        await clock.advance(2)
    assert election.done() and election.exception() is None
    assert replica.work_cancelled and replica.leading[-1] is False


async def test_a_lease_another_replica_holds_keeps_this_one_waiting(
        clock: FakeClock, store: LeaseStore) -> None:
    store.record = LeaderElectionRecord("other", "15", "now", "now")
    replica = Replica()
    election = replica.lead()
    for _ in range(5):
        await clock.advance(2)                  # within the other's lease
    assert not replica.work_started.is_set() and not election.done()
    for _ in range(5):
        await clock.advance(2)                  # the other stopped renewing: expired
    assert replica.work_started.is_set() and replica.leading == [True]
    assert store.record.holder_identity == "me"
    election.cancel()
    await asyncio.gather(election, return_exceptions=True)
    assert replica.work_cancelled and replica.leading[-1] is False


async def test_a_hung_renewal_is_a_failed_one(clock: FakeClock, store: LeaseStore) -> None:
    """The library's calls have no timeout; a manager that stops answering must not let a
    replica believe it still leads. (The attempt timeout is on the event loop's time.)"""
    replica = Replica()
    election = replica.lead()
    await settle()
    assert replica.work_started.is_set()
    store.hang = True
    deadline = asyncio.get_running_loop().time() + 30
    while not election.done() and asyncio.get_running_loop().time() < deadline:
        await clock.advance(2)
        await asyncio.sleep(0.5)
    assert election.done() and replica.work_cancelled and replica.leading[-1] is False


async def test_a_crash_of_the_work_ends_the_election(
        clock: FakeClock, store: LeaseStore) -> None:
    async def crash() -> None:
        raise RuntimeError("the controller broke")
    replica = Replica(work=crash)
    election = replica.lead()
    async with asyncio.timeout(5):
        await asyncio.gather(election, return_exceptions=True)
    assert replica.leading == [True, False]
