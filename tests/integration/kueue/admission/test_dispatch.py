"""The dispatcher as the AdmissionCheck of a real Kueue on its manager: one job's way.

Kueue reserves quota and keeps the job suspended; the dispatcher places it, sets our
check Ready naming the worker once the mirror exists, and Kueue then unsuspends the
manager job (writing its flavor's node labels into its own runtime patch, which the
mirror never carries), which completes while the manager's Trainer makes nothing of it;
a job that fits its ClusterQueue but no worker is Rejected with the reason, and so is a
job the dispatcher does not claim (no `spec.managedBy`); a check left Pending while no
dispatcher ran is taken up once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from devkit.factories import trainjob
from devkit.localcluster.access import free_port
from devkit.localcluster.kueue_objects import (
    ADMISSION_CHECKS,
    API_VERSION,
    CLUSTER_QUEUES,
    FIELD_MANAGER,
    WORKLOADS,
    setup_queues,
    wait_active,
)
from devkit.localcluster.trainer import JOBSETS
from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.resource import EVENTS, Resource
from tests.integration.conftest import DispatcherRunner, eventually
from tests.integration.kueue.admission.conftest import (
    FLAVOR_LABELS,
    LOCAL_QUEUE,
    MANAGER,
    QUEUE_QUOTA,
    WORKER,
    WORKER_QUOTA,
    Plane,
    controller_of,
    flavor_selectors,
    free_of_the_flavor,
    kueue_patch,
    our_check,
    queues,
    start,
    submit,
    workload_of,
)
from tests.integration.kueue.conftest import conditions, is_true

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(autouse=True)
async def team(admission_plane: Plane, ns: str) -> None:
    """One ClusterQueue, larger than the worker, waiting for the test's check."""
    await queues(admission_plane, ns)

async def test_kueue_admits_the_dispatcher_places_and_the_job_runs(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    manager = admission_plane.clients[MANAGER]
    await start(admission_plane, dispatchers)
    await wait_active(manager, ADMISSION_CHECKS, [ns])
    check = await Resource(manager, ADMISSION_CHECKS).get(ns)
    assert conditions(check)["Active"]["reason"] == c.REASON_CHECK_ACTIVE
    # Not the dispatcher's (no managedBy, no queue): the manager's Trainer runs it, which
    # shows it is there to run what managedBy does not keep it out of.
    await Resource(manager, TRAINJOBS).create(trainjob("trainers-own", ns), namespace=ns)
    await submit(admission_plane, ns, "runs")

    async def ready() -> dict[str, Any] | None:
        workload = await workload_of(admission_plane, ns, "runs")
        return workload if our_check(workload, ns).get("state") == "Ready" else None
    workload = await eventually(ready, timeout=60, interval=0.2)
    assert WORKER in our_check(workload, ns)["message"]

    async def unsuspended() -> dict[str, Any] | None:
        job = await Resource(manager, TRAINJOBS).get("runs", namespace=ns)
        return job if job and job["spec"].get("suspend") is False else None
    job = await eventually(unsuspended, timeout=30, interval=0.2)
    assert flavor_selectors(kueue_patch(job)) == [FLAVOR_LABELS], kueue_patch(job)
    mirror = await Resource(admission_plane.clients[WORKER], TRAINJOBS).get("runs", namespace=ns)
    assert mirror is not None and not mirror["spec"].get("suspend")
    assert mirror["spec"].get("managedBy") != MANAGED_BY_MULTIKUEUE
    assert free_of_the_flavor(mirror), mirror["spec"]

    async def complete() -> dict[str, Any] | None:
        job = await Resource(manager, TRAINJOBS).get("runs", namespace=ns)
        return job if is_true(job, "Complete") else None
    job = await eventually(complete, timeout=90, interval=0.2)
    assert job["spec"].get("suspend") is False, "Kueue unsuspended the manager job"
    assert (job["metadata"].get("annotations") or {})[c.ANNOTATION_CLUSTER] == WORKER

    async def finished() -> dict[str, Any] | None:
        found = await workload_of(admission_plane, ns, "runs")
        return found if is_true(found, "Finished") else None
    workload = await eventually(finished, timeout=30, interval=0.2)
    assert our_check(workload, ns)["state"] == "Ready", workload["status"]
    assert not our_check(workload, ns).get("retryCount"), workload["status"]

    async def trainers_own() -> list[str]:
        listed = await Resource(manager, JOBSETS).list(namespace=ns)
        return [j["metadata"]["name"] for j in listed["items"]]
    assert await eventually(trainers_own, timeout=30, interval=0.2) == ["trainers-own"], \
        "the manager's Trainer made a JobSet of a job whose managedBy is MultiKueue's"


async def test_a_job_that_fits_its_cluster_queue_but_no_worker_is_rejected(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    manager = admission_plane.clients[MANAGER]
    await start(admission_plane, dispatchers)
    await wait_active(manager, ADMISSION_CHECKS, [ns])
    await submit(admission_plane, ns, "too-big", num_nodes=2,
                 resources_per_node={"requests": {"cpu": "40", "memory": "8Gi"}})

    async def rejection() -> str:
        """Kueue's event on the Workload: it deactivated it for our Rejected check, whose
        message it quotes (the check itself is reset to Pending right after)."""
        listed = await Resource(manager, EVENTS).list(namespace=ns)
        return next((str(e.get("note")) for e in listed["items"]
                     if e.get("reason") == "AdmissionCheckRejected"), "")
    note = await eventually(rejection, timeout=60, interval=0.2)
    assert "no worker can hold it" in note and "cpu" in note, note

    async def deactivated() -> dict[str, Any] | None:
        found = await workload_of(admission_plane, ns)
        return found if (found or {}).get("spec", {}).get("active") is False else None
    await eventually(deactivated, timeout=30, interval=0.2)

    async def told() -> dict[str, Any] | None:
        job = await Resource(manager, TRAINJOBS).get("too-big", namespace=ns)
        shown = conditions(job).get(c.CONDITION_DISPATCHED, {})
        return shown if shown.get("reason") == c.REASON_CHECK_REJECTED else None
    await eventually(told, timeout=10, interval=0.2)
    job = await Resource(manager, TRAINJOBS).get("too-big", namespace=ns)
    assert job is not None and job["spec"].get("suspend") is True
    assert await Resource(admission_plane.clients[WORKER], TRAINJOBS).get(
        "too-big", namespace=ns) is None


async def test_a_job_the_dispatcher_does_not_claim_is_rejected_saying_why(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    """Kueue sets managedBy only under MultiKueue's own checks: a job in our queue made
    without it is never dispatched, so our check rejects it, with why, and Kueue
    deactivates its Workload and releases the team's quota."""
    manager = admission_plane.manager
    await start(admission_plane, dispatchers)
    await wait_active(manager, ADMISSION_CHECKS, [ns])
    await Resource(manager, TRAINJOBS).create(
        trainjob("unmanaged", ns, labels={c.LABEL_KUEUE_QUEUE: LOCAL_QUEUE}), namespace=ns)

    async def rejection() -> str:
        listed = await Resource(manager, EVENTS).list(namespace=ns)
        return next((str(e.get("note")) for e in listed["items"]
                     if e.get("reason") == "AdmissionCheckRejected"), "")
    note = await eventually(rejection, timeout=60, interval=0.2)
    assert f"spec.managedBy is not {MANAGED_BY_MULTIKUEUE}" in note, note
    assert c.LABEL_DISPATCH in note, note

    async def released() -> dict[str, Any] | None:
        found = await workload_of(admission_plane, ns, "unmanaged")
        return (found if found and found["spec"].get("active") is False
                and not is_true(found, "QuotaReserved") else None)
    await eventually(released, timeout=30, interval=0.2)
    await submit(admission_plane, ns, "managed")

    async def ready() -> bool:
        return our_check(await workload_of(admission_plane, ns, "managed"),
                         ns).get("state") == "Ready"
    await eventually(ready, timeout=60, interval=0.2)
    listed = await Resource(manager, WORKLOADS).list(namespace=ns)
    assert len(listed["items"]) == 2
    assert await Resource(admission_plane.worker, TRAINJOBS).get(
        "unmanaged", namespace=ns) is None


async def test_a_check_left_pending_while_no_dispatcher_ran_is_taken_up_once(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    """The dispatcher stops with our check Active; Kueue reserves quota for a new job, its
    check Pending; a new dispatcher places it once: one record, one mirror, Ready."""
    manager = admission_plane.clients[MANAGER]
    first = await start(admission_plane, dispatchers)
    await wait_active(manager, ADMISSION_CHECKS, [ns])
    await dispatchers.stop(first)
    await submit(admission_plane, ns, "while-away")

    async def pending() -> dict[str, Any] | None:
        workload = await workload_of(admission_plane, ns)
        return (workload if is_true(workload, "QuotaReserved")
                and our_check(workload, ns).get("state") == "Pending" else None)
    await eventually(pending, timeout=30, interval=0.2)
    await start(admission_plane, dispatchers)

    async def ready() -> dict[str, Any] | None:
        workload = await workload_of(admission_plane, ns)
        return workload if our_check(workload, ns).get("state") == "Ready" else None
    await eventually(ready, timeout=60, interval=0.2)
    records = await Resource(manager, PLACEMENTS).list(namespace=f"{ns}-system")
    assert len(records["items"]) == 1, records["items"]
    mirrors = await Resource(admission_plane.clients[WORKER], TRAINJOBS).list(namespace=ns)
    assert [m["metadata"]["name"] for m in mirrors["items"]] == ["while-away"]


async def test_a_check_naming_a_parameters_object_is_inactive_and_says_why(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    """The dispatcher takes no parameters: such a check stays inactive, and Kueue holds
    the ClusterQueue using it inactive, so nothing is admitted on a guess."""
    name = f"{ns}-params"
    await Resource(admission_plane.manager, ADMISSION_CHECKS).apply({
        "apiVersion": API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": name},
        "spec": {"controllerName": controller_of(ns), "parameters": {
            "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "fleet"}}},
        field_manager=FIELD_MANAGER)
    await setup_queues(admission_plane.manager, cluster_queue_name=f"cq-{name}",
                       local_queue_name="params", namespaces=[ns], quota=QUEUE_QUOTA,
                       admission_check=name, flavor_labels=FLAVOR_LABELS)
    await start(admission_plane, dispatchers)

    async def refused() -> dict[str, Any] | None:
        active = conditions(await Resource(admission_plane.manager, ADMISSION_CHECKS).get(
            name)).get("Active", {})
        return active if active.get("reason") == c.REASON_PARAMETERS_NOT_SUPPORTED else None
    active = await eventually(refused, timeout=30, interval=0.2)
    assert active["status"] == "False" and "MultiKueueConfig fleet" in active["message"]

    async def queue_inactive() -> dict[str, Any] | None:
        queue = await Resource(admission_plane.manager, CLUSTER_QUEUES).get(f"cq-{name}")
        shown = conditions(queue).get("Active", {})
        return shown if shown.get("status") == "False" else None
    shown = await eventually(queue_inactive, timeout=30, interval=0.2)
    assert name in shown.get("message", ""), shown


async def test_a_job_only_an_inactive_worker_could_hold_waits_saying_so(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner,
        tmp_path: Path) -> None:
    """Not Rejected: the worker that could hold it may come back. Our check stays Pending
    with the reason, and the Workload keeps its place."""
    kubeconfig = yaml.safe_load(admission_plane.plane.clusters[WORKER].kubeconfig_path
                                .read_text())
    for cluster in kubeconfig["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    dead = tmp_path / "big.kubeconfig"
    dead.write_text(yaml.safe_dump(kubeconfig))
    await start(admission_plane, dispatchers, wait_for_workers=False, workers={"static": [
        {"name": WORKER, "kubeconfig": str(admission_plane.plane.clusters[WORKER]
                                           .kubeconfig_path), "quota": WORKER_QUOTA},
        {"name": "big", "kubeconfig": str(dead), "quota": {"cpu": "200", "memory": "800Gi"}},
    ]})
    await wait_active(admission_plane.manager, ADMISSION_CHECKS, [ns])
    await submit(admission_plane, ns, "waits", num_nodes=2,
                 resources_per_node={"requests": {"cpu": "40", "memory": "8Gi"}})

    async def told() -> dict[str, Any] | None:
        check = our_check(await workload_of(admission_plane, ns), ns)
        return check if "only workers that are not active" in check.get("message", "") \
            else None
    check = await eventually(told, timeout=60, interval=0.2)
    assert check["state"] == "Pending" and "big" in check["message"], check
    workload = await workload_of(admission_plane, ns)
    assert workload is not None and workload["spec"].get("active") is not False
    assert is_true(workload, "QuotaReserved")
