"""Faults injected into real API servers; the invariants hold after each one."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.factories import trainjob
from devkit.invariants import check_invariants
from devkit.localcluster import LocalCluster, LocalControlPlane
from devkit.localcluster.trainer import end_pods
from dispatcher.api import conditions
from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS, PlacementRecord, record_of
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource
from tests.conftest import until_answering
from tests.integration.conftest import (
    DEFAULT_QUOTA,
    StartDispatcher,
    counted,
    eventually,
    looked_at,
    settled,
    trainjobs_refused,
)

pytestmark = pytest.mark.integration
QUOTAS = {"worker-a": DEFAULT_QUOTA, "worker-b": DEFAULT_QUOTA}


async def placements(clients: dict[str, ClusterClient], namespace: str) -> dict[str, str]:
    listed = await Resource(clients["manager"], TRAINJOBS).list(namespace=namespace)
    return {j["metadata"]["name"]: (j["metadata"].get("annotations") or {}).get(
        c.ANNOTATION_CLUSTER, "") for j in listed["items"]}


async def annotations_of(clients: dict[str, ClusterClient], namespace: str,
                         name: str) -> dict[str, str]:
    job = await Resource(clients["manager"], TRAINJOBS).get(name, namespace=namespace)
    return dict(((job or {}).get("metadata") or {}).get("annotations") or {})


async def create(clients: dict[str, ClusterClient], namespace: str, names: list[str],
                 **kwargs: Any) -> None:
    """Create TrainJobs on the manager; a 429 (its storage still re-initializing after a
    restart, which reads may not show yet) is retried for a while."""
    jobs = Resource(clients["manager"], TRAINJOBS)
    for name in names:
        body = trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE, **kwargs)
        for attempt in range(60):
            try:
                await jobs.create(body, namespace=namespace)
                break
            except ApiException as error:
                if error.status != 429 or attempt == 59:
                    raise
                await asyncio.sleep(0.5)


async def assert_invariants(clients: dict[str, ClusterClient], namespace: str) -> None:
    async def hold() -> bool:
        return not await check_invariants(clients, namespace, workers=QUOTAS, origin=namespace)
    try:
        await eventually(hold, timeout=15, interval=0.5)
    except AssertionError:
        problems = await check_invariants(clients, namespace, workers=QUOTAS, origin=namespace)
        raise AssertionError(f"invariants violated: {problems}") from None


async def on_worker(clients: dict[str, ClusterClient], namespace: str, names: list[str],
                    worker: str) -> list[str]:
    placed = await placements(clients, namespace)
    return [n for n in names if placed.get(n) == worker]


async def test_short_outage_evicts_nothing(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_b: LocalCluster,
) -> None:
    dispatcher = await start_dispatcher(workers={"lostTimeoutSeconds": 30})
    names = [f"steady-{i}" for i in range(6)]
    await create(admin_clients, namespace, names)
    await eventually(lambda: _all_placed(admin_clients, namespace, names))
    before = await placements(admin_clients, namespace)

    async def b_usable(usable: bool) -> bool:
        assert dispatcher.registry is not None
        return dispatcher.registry.workers["worker-b"].usable() is usable

    def requeued() -> float:
        return dispatcher.metrics.registry.get_sample_value(
            "dispatcher_reconciles_total", {"result": "requeue"}) or 0.0

    async def looked_at_b(floor: float) -> bool:
        return requeued() >= floor
    on_b = [name for name, worker in before.items() if worker == "worker-b"]
    assert on_b, before
    seen = requeued()
    worker_b.pause()
    try:  # an outage the dispatcher sees, shorter than the lost timeout
        await eventually(lambda: b_usable(False), timeout=20)
        # Proof it looked: each job on worker-b was reconciled and told to wait for the
        # worker (a requeue), not evicted.
        await eventually(lambda: looked_at_b(seen + len(on_b)), timeout=10)
    finally:
        worker_b.resume()
    await eventually(lambda: b_usable(True), timeout=20)  # it saw the outage end
    assert await placements(admin_clients, namespace) == before
    for name in names:
        assert c.ANNOTATION_EVICTIONS not in await annotations_of(admin_clients, namespace, name)
    await assert_invariants(admin_clients, namespace)


async def _all_placed(clients: dict[str, ClusterClient], namespace: str,
                      names: list[str]) -> bool:
    placed = await placements(clients, namespace)
    return all(placed.get(n) for n in names)


async def test_lost_worker_jobs_move_and_stale_mirrors_are_collected_on_return(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_b: LocalCluster,
) -> None:
    await start_dispatcher(workers={"lostTimeoutSeconds": 2})
    names = [f"mobile-{i}" for i in range(6)]
    await create(admin_clients, namespace, names)
    await eventually(lambda: _all_placed(admin_clients, namespace, names))
    moved = await on_worker(admin_clients, namespace, names, "worker-b")
    assert moved, "MostFree should have spread the jobs over both workers"
    worker_b.pause()
    try:
        async def all_on_a() -> bool:
            return len(await on_worker(admin_clients, namespace, names, "worker-a")) == 6
        await eventually(all_on_a, timeout=30, interval=0.5)
    finally:
        worker_b.resume()
    for name in moved:
        annotations = await annotations_of(admin_clients, namespace, name)
        assert annotations[c.ANNOTATION_EVICTIONS] == "1"

    async def b_collected() -> bool:
        listed = await Resource(admin_clients["worker-b"], TRAINJOBS).list(namespace=namespace)
        return not listed["items"]
    await eventually(b_collected, timeout=20, interval=0.5)
    await assert_invariants(admin_clients, namespace)


async def test_when_lost_wait_keeps_the_jobs_on_the_lost_worker_until_it_answers(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_b: LocalCluster,
) -> None:
    await start_dispatcher(workers={"lostTimeoutSeconds": 2, "whenLost": "Wait"})
    names = [f"held-{i}" for i in range(6)]
    await create(admin_clients, namespace, names)
    await eventually(lambda: _all_placed(admin_clients, namespace, names))
    before = await placements(admin_clients, namespace)
    held = await on_worker(admin_clients, namespace, names, "worker-b")
    assert held, "MostFree should have spread the jobs over both workers"
    mirrors_b = Resource(admin_clients["worker-b"], TRAINJOBS)

    async def mirrored() -> dict[str, str] | None:  # placed first, mirrored a moment after
        uids = {m["metadata"]["name"]: m["metadata"]["uid"]
                for m in (await mirrors_b.list(namespace=namespace))["items"]}
        return uids if set(uids) == set(held) else None
    uids_before = await eventually(mirrored)
    jobs = Resource(admin_clients["manager"], TRAINJOBS)

    async def dispatched_reasons() -> dict[str, str]:
        listed = await jobs.list(namespace=namespace)
        return {j["metadata"]["name"]: (condition_of(j, c.CONDITION_DISPATCHED) or {}).get(
            "reason", "") for j in listed["items"]}

    worker_b.pause()
    try:
        async def all_held() -> dict[str, str] | None:
            reasons = await dispatched_reasons()
            return reasons if all(reasons[n] == c.REASON_WORKER_UNREACHABLE
                                  for n in held) else None
        await eventually(all_held, timeout=30, interval=0.5)

        async def held_past_the_timeout() -> str | None:  # decided after the 2 s ran out
            job = await jobs.get(held[0], namespace=namespace)
            message = str((condition_of(job or {}, c.CONDITION_DISPATCHED) or {}).get(
                "message", ""))
            return message if "whenLost: Wait" in message else None
        message = await eventually(held_past_the_timeout, timeout=20)
        assert "worker-b unreachable since" in message
        assert await placements(admin_clients, namespace) == before
        mirrors_a = await Resource(admin_clients["worker-a"], TRAINJOBS).list(
            namespace=namespace)
        assert not {m["metadata"]["name"] for m in mirrors_a["items"]} & set(held)
    finally:
        worker_b.resume()

    async def answered_again() -> bool:
        reasons = await dispatched_reasons()
        return all(reasons[n] not in (c.REASON_WORKER_UNREACHABLE, "") for n in held)
    await eventually(answered_again, timeout=30, interval=0.5)
    assert await placements(admin_clients, namespace) == before
    uids_after = {m["metadata"]["name"]: m["metadata"]["uid"]
                  for m in (await mirrors_b.list(namespace=namespace))["items"]}
    assert uids_after == uids_before, "the held jobs' mirrors were kept, not recreated"
    for name in names:
        assert c.ANNOTATION_EVICTIONS not in await annotations_of(admin_clients, namespace, name)
    await assert_invariants(admin_clients, namespace)


def condition_of(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return conditions.condition(job.get("status"), type_)


async def test_mirror_deleted_by_hand_or_evicted_remotely_is_requeued(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    await start_dispatcher()
    await create(admin_clients, namespace, ["deleted", "preempted"])
    await eventually(lambda: _all_placed(admin_clients, namespace, ["deleted", "preempted"]))
    placed = await placements(admin_clients, namespace)

    worker = Resource(admin_clients[placed["deleted"]], TRAINJOBS)
    first = await worker.get("deleted", namespace=namespace)
    assert first is not None
    await worker.delete("deleted", namespace=namespace)

    async def recreated() -> bool:
        annotations = await annotations_of(admin_clients, namespace, "deleted")
        where = annotations.get(c.ANNOTATION_CLUSTER)
        if annotations.get(c.ANNOTATION_EVICTIONS) != "1" or not where:
            return False
        mirror = await Resource(admin_clients[where], TRAINJOBS).get("deleted",
                                                                     namespace=namespace)
        return bool(mirror and mirror["metadata"]["uid"] != first["metadata"]["uid"])
    await eventually(recreated, timeout=20)

    # The worker suspends the mirror after its pods ran, as its own Kueue does when it
    # preempts a workload; the worker's Trainer suspends the JobSet: requeue.
    remote = Resource(admin_clients[placed["preempted"]], TRAINJOBS)

    async def running_there() -> bool:
        return TrainJobKind().running(await remote.get("preempted", namespace=namespace))
    await eventually(running_there, timeout=30)
    await remote.merge_patch("preempted", {"spec": {"suspend": True}}, namespace=namespace)

    async def requeued() -> bool:
        annotations = await annotations_of(admin_clients, namespace, "preempted")
        return annotations.get(c.ANNOTATION_EVICTIONS) == "1"
    await eventually(requeued, timeout=20)
    await eventually(lambda: _all_placed(admin_clients, namespace, ["preempted"]), timeout=20)
    await assert_invariants(admin_clients, namespace)


async def test_failure_is_retried_only_when_the_job_opts_in(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    await start_dispatcher()
    await create(admin_clients, namespace, ["flaky"],
                 annotations={c.ANNOTATION_RETRY_ON_REASONS: "FailedJobs, ReachedMaxRestarts"})
    await eventually(lambda: _all_placed(admin_clients, namespace, ["flaky"]))
    placed = (await placements(admin_clients, namespace))["flaky"]
    await eventually(lambda: end_pods(admin_clients[placed], namespace, "flaky", fail=True),
                     timeout=30)  # its pod fails: the worker's JobSet fails with FailedJobs

    async def retried() -> bool:
        annotations = await annotations_of(admin_clients, namespace, "flaky")
        return (annotations.get(c.ANNOTATION_EVICTIONS) == "1"
                and bool(annotations.get(c.ANNOTATION_CLUSTER)))
    await eventually(retried, timeout=20)
    job = await Resource(admin_clients["manager"], TRAINJOBS).get("flaky", namespace=namespace)
    assert job is not None
    assert not any(x["type"] == "Failed" for x in job["status"].get("conditions") or [])
    await assert_invariants(admin_clients, namespace)


async def test_manager_api_server_restart_is_survived(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    manager: LocalCluster,
) -> None:
    await start_dispatcher()
    await create(admin_clients, namespace, ["before"])
    await eventually(lambda: _all_placed(admin_clients, namespace, ["before"]))
    await manager.restart()
    await until_answering(admin_clients["manager"], TRAINJOBS)
    await create(admin_clients, namespace, ["after"])
    await eventually(lambda: _all_placed(admin_clients, namespace, ["before", "after"]),
                     timeout=40, interval=0.5)
    await assert_invariants(admin_clients, namespace)


async def test_worker_without_the_trainjob_crd_is_inactive_and_unused(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    if "bare" not in control_plane.clusters:
        await control_plane.start(["bare"], crd_files=[])
    dispatcher = await start_dispatcher(wait_for_workers=False, workers={"static": [
        {"name": "bare", "kubeconfig": str(control_plane.clusters["bare"].kubeconfig_path),
         "quota": {"cpu": "1000", "memory": "1000Gi"}},
        {"name": "worker-a", "kubeconfig": str(control_plane.clusters["worker-a"]
                                               .kubeconfig_path), "quota": DEFAULT_QUOTA},
    ]})
    assert dispatcher.registry is not None

    async def bare_missing_crd() -> bool:
        bare = dispatcher.registry.get("bare") if dispatcher.registry else None
        return bool(bare and not bare.active and bare.reason == c.REASON_MISSING_CRD)
    await eventually(bare_missing_crd, timeout=20)
    await create(admin_clients, namespace, ["picky-0", "picky-1"])
    await eventually(lambda: _all_placed(admin_clients, namespace, ["picky-0", "picky-1"]))
    assert set((await placements(admin_clients, namespace)).values()) == {"worker-a"}


async def test_a_job_evicted_too_often_fails_with_the_reason(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    await start_dispatcher(mirror={"maxEvictions": 2, "requeueBackoffSeconds": 0.1})
    await create(admin_clients, namespace, ["unlucky"])
    for attempt in (1, 2):
        await eventually(lambda: _all_placed(admin_clients, namespace, ["unlucky"]), timeout=15)
        worker = (await placements(admin_clients, namespace))["unlucky"]
        remote = Resource(admin_clients[worker], TRAINJOBS)
        await eventually(lambda r=remote: r.get("unlucky", namespace=namespace))
        await remote.delete("unlucky", namespace=namespace)

        async def evicted(count: int = attempt) -> bool:
            annotations = await annotations_of(admin_clients, namespace, "unlucky")
            return annotations.get(c.ANNOTATION_EVICTIONS) == str(count)
        await eventually(evicted, timeout=15)

    async def failed() -> dict[str, Any] | None:
        job = await Resource(admin_clients["manager"], TRAINJOBS).get("unlucky",
                                                                      namespace=namespace)
        for cond in ((job or {}).get("status") or {}).get("conditions") or []:
            if cond["type"] == "Failed" and cond["status"] == "True":
                return dict(cond)
        return None
    cond = await eventually(failed, timeout=15)
    assert cond["reason"] == c.REASON_TOO_MANY_EVICTIONS

    async def nowhere() -> bool:
        return (await placements(admin_clients, namespace))["unlucky"] == ""
    await eventually(nowhere)
    await assert_invariants(admin_clients, namespace)


async def test_mirror_finished_then_deleted_by_a_worker_ttl_is_not_rerun(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    await start_dispatcher(mirror={"keepFinished": True})  # the worker's TTL deletes it
    await create(admin_clients, namespace, ["ttl"])
    await eventually(lambda: _all_placed(admin_clients, namespace, ["ttl"]))
    worker = (await placements(admin_clients, namespace))["ttl"]
    remote = Resource(admin_clients[worker], TRAINJOBS)
    await eventually(lambda: end_pods(admin_clients[worker], namespace, "ttl"), timeout=30)

    async def complete_there() -> bool:
        mirror = await remote.get("ttl", namespace=namespace)
        return TrainJobKind().finished((mirror or {}).get("status")) is not None
    await eventually(complete_there, timeout=30)
    await remote.delete("ttl", namespace=namespace)  # at once, as a worker's TTL may

    async def complete() -> bool:
        job = await Resource(admin_clients["manager"], TRAINJOBS).get("ttl", namespace=namespace)
        return any(x["type"] == "Complete" and x["status"] == "True"
                   for x in ((job or {}).get("status") or {}).get("conditions") or [])
    await eventually(complete, timeout=15)
    assert c.ANNOTATION_EVICTIONS not in await annotations_of(admin_clients, namespace, "ttl")

    async def left() -> bool:  # the dispatcher's last step for a finished job
        job = await Resource(admin_clients["manager"], TRAINJOBS).get("ttl", namespace=namespace)
        return c.FINALIZER not in ((job or {}).get("metadata", {}).get("finalizers") or [])
    await eventually(left, timeout=15)
    assert await Resource(admin_clients["worker-a"], TRAINJOBS).get("ttl", namespace=namespace) \
        is None
    assert await Resource(admin_clients["worker-b"], TRAINJOBS).get("ttl", namespace=namespace) \
        is None
    await assert_invariants(admin_clients, namespace)


async def test_revoked_credentials_are_unauthorized_not_unreachable(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane, namespace: str,
    tmp_path: Any,
) -> None:
    from devkit.localcluster.pki import ensure_certificates, sign_client_certificate

    stranger = ensure_certificates(tmp_path / "other-ca")
    cert, key = sign_client_certificate(stranger, user="revoked", groups=["system:masters"])
    kubeconfig = control_plane.clusters["worker-b"].kubeconfig(user="revoked", cert=cert,
                                                                key=key)
    (tmp_path / "revoked.yaml").write_text(yaml.safe_dump(kubeconfig))
    dispatcher = await start_dispatcher(wait_for_workers=False, workers={"static": [
        {"name": "worker-b", "kubeconfig": str(tmp_path / "revoked.yaml"),
         "quota": DEFAULT_QUOTA}]})

    async def unauthorized() -> bool:
        worker = dispatcher.registry.get("worker-b") if dispatcher.registry else None
        return bool(worker and worker.reason == c.REASON_UNAUTHORIZED and not worker.active)
    await eventually(unauthorized, timeout=15)


async def _record(clients: dict[str, ClusterClient], namespace: str, name: str
                  ) -> PlacementRecord | None:
    job = await Resource(clients["manager"], TRAINJOBS).get(name, namespace=namespace)
    assert job is not None
    found = await Resource(clients["manager"], PLACEMENTS).get(
        job["metadata"]["uid"], namespace=f"{namespace}-system")
    return record_of(found) if found is not None else None


async def test_a_restart_keeps_the_eviction_backoff_and_the_exclusion(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str],
) -> None:
    """The requeue state is in the Placement record: a dispatcher stopped right after
    it took two jobs off (one evicted, in backoff; one refused by worker-a, kept off it)
    leaves a successor that neither places the first early nor offers worker-a the
    second, which fits nowhere else."""
    squatter = trainjob("contested", namespace)
    await Resource(admin_clients["worker-a"], TRAINJOBS).create(squatter, namespace=namespace)
    overrides: dict[str, Any] = {
        "mirror": {"requeueBackoffSeconds": 20},
        "placement": {"rejectionBackoffSeconds": 300},
        "workers": {"static": [  # worker-a the roomier: MostFree offers it first
            {"name": "worker-a", "kubeconfig": worker_kubeconfigs["worker-a"],
             "quota": {"cpu": "64", "memory": "64Gi"}},
            {"name": "worker-b", "kubeconfig": worker_kubeconfigs["worker-b"],
             "quota": {"cpu": "8", "memory": "8Gi"}}]},
    }
    first = await start_dispatcher(**overrides)
    await create(admin_clients, namespace, ["evicted"])
    await create(admin_clients, namespace, ["contested"], num_nodes=1,
                 resources_per_node={"requests": {"cpu": "10"}})  # more than worker-b has
    await eventually(lambda: _all_placed(admin_clients, namespace, ["evicted"]), timeout=20)
    where = (await placements(admin_clients, namespace))["evicted"]
    await Resource(admin_clients[where], TRAINJOBS).delete("evicted", namespace=namespace)

    async def both_taken_off() -> tuple[PlacementRecord, PlacementRecord] | None:
        evicted = await _record(admin_clients, namespace, "evicted")
        contested = await _record(admin_clients, namespace, "contested")
        if (evicted is None or evicted.placed or not evicted.not_before
                or contested is None or contested.placed or not contested.excluded):
            return None
        return evicted, contested
    evicted, contested = await eventually(both_taken_off, timeout=20)
    await start_dispatcher.stop(first)
    assert contested.excluded_at(time.time()) == frozenset({"worker-a"})
    assert evicted.not_before > time.time() + 10, "the backoff of 20 s has not run out"

    second = await start_dispatcher(**overrides)
    await settled(second)
    await looked_at(second, [evicted.uid, contested.uid])
    assert counted(second, "dispatcher_placements_total") == 0
    assert counted(second, "dispatcher_dispatch_errors_total") == 0
    still = await _record(admin_clients, namespace, "evicted")
    assert still is not None and not still.placed and still.not_before == evicted.not_before
    refused = await _record(admin_clients, namespace, "contested")
    assert refused is not None and not refused.placed
    assert refused.excluded == contested.excluded
    # Once the backoff runs out, the evicted job is placed again.
    await eventually(lambda: _all_placed(admin_clients, namespace, ["evicted"]), timeout=30)
    placed = await _record(admin_clients, namespace, "evicted")
    assert placed is not None and placed.evictions == 1
    assert time.time() >= evicted.not_before


async def test_a_crash_between_the_record_and_the_mirror_delete_brings_no_mirror_back(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    """Taking a job off writes the record first, then deletes the mirror. The worker
    refuses the delete (an admission policy), so the dispatcher is stopped exactly
    between the two writes; the one started after it finds a job not placed and a live
    mirror of it, which it deletes before it offers the worker, then places the job
    again: never two mirrors at once, never one made again on the old placement."""
    overrides = {"mirror": {"requeueBackoffSeconds": 2}}
    first = await start_dispatcher(**overrides)
    await create(admin_clients, namespace, ["withdrawn"])
    await eventually(lambda: _all_placed(admin_clients, namespace, ["withdrawn"]), timeout=20)
    where = (await placements(admin_clients, namespace))["withdrawn"]
    remote = Resource(admin_clients[where], TRAINJOBS)

    async def running_there() -> bool:
        return TrainJobKind().running(await remote.get("withdrawn", namespace=namespace))
    await eventually(running_there, timeout=30)
    old = await remote.get("withdrawn", namespace=namespace)
    assert old is not None
    async with trainjobs_refused(admin_clients[where], namespace, "DELETE",
                                 "deletes held for the test"):
        # The worker suspends the mirror, as its Kueue does when it preempts: evicted.
        await remote.merge_patch("withdrawn", {"spec": {"suspend": True}}, namespace=namespace)

        async def taken_off_not_deleted() -> bool:
            record = await _record(admin_clients, namespace, "withdrawn")
            return bool(record and not record.placed and record.evictions == 1)
        await eventually(taken_off_not_deleted, timeout=20)
        assert await remote.get("withdrawn", namespace=namespace) is not None
        await start_dispatcher.stop(first)

    samples: list[list[str]] = []

    async def sample() -> None:
        while True:
            live = []
            for worker in QUOTAS:
                found = await Resource(admin_clients[worker], TRAINJOBS).get(
                    "withdrawn", namespace=namespace)
                if found is not None and not found["metadata"].get("deletionTimestamp"):
                    live.append(f"{worker}/{found['metadata']['uid']}")
            samples.append(live)
            await asyncio.sleep(0.05)
    sampler = asyncio.create_task(sample())
    try:
        await start_dispatcher(**overrides)

        async def placed_anew() -> str | None:
            record = await _record(admin_clients, namespace, "withdrawn")
            if record is None or not record.placed:
                return None
            mirror = await Resource(admin_clients[record.worker], TRAINJOBS).get(
                "withdrawn", namespace=namespace)
            fresh = mirror is not None and mirror["metadata"]["uid"] != old["metadata"]["uid"]
            return f"{record.worker}/{mirror['metadata']['uid']}" if fresh and mirror else None
        new = await eventually(placed_anew, timeout=30)
    finally:
        sampler.cancel()
        await asyncio.wait([sampler])
    assert all(len(live) <= 1 for live in samples), [s for s in samples if len(s) > 1]
    seen = [live[0] for live in samples if live]
    if new in seen:  # once the new mirror is there, the old one never shows again
        assert f"{where}/{old['metadata']['uid']}" not in seen[seen.index(new):]
    record = await _record(admin_clients, namespace, "withdrawn")
    assert record is not None and record.evictions == 1, "taken off once, not twice"
    await assert_invariants(admin_clients, namespace)
