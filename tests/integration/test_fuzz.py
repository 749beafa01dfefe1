"""A fuzz run through the real API server: 500 schema-valid but odd TrainJobs among
normal ones. The dispatcher never crashes or stalls, each odd job ends in its named
reason within seconds (or is refused at create by the manager's own Trainer webhook,
with its message), every normal job completes on a worker's real Trainer chain, and the
ledger's invariants hold at every moment of the run."""

from __future__ import annotations

import asyncio
import random
import string
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from devkit.factories import trainjob
from devkit.invariants import check_invariants
from devkit.localcluster.trainer import kwok_patch
from dispatcher.api import constants as c
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource, status_of
from dispatcher.placement.resources import parse_vector
from tests.integration.conftest import StartDispatcher, eventually

pytestmark = pytest.mark.integration
WORKERS = ("worker-a", "worker-b")
QUOTA = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}
ODD_JOBS = 500
NORMAL_JOBS = 60
COMPLETE = "Complete"
Job = tuple[dict[str, Any], str]
"""A TrainJob and the reason it must end with (`Complete` for a normal job)."""

BAD_QUANTITIES = ["-1", "-0.5", -3, "-1Gi", "1e65", "99999999999999999999", "1" * 70,
                  "-0.001m"]
LONGEST_NAME = 63 - len("-node-0-4999-abcde")
"""The longest name whose pods JobSet can name with 5,000 nodes of the torch runtime."""
INVALID_SELECTORS = ["gpu in (a100", "=x", "a b c", "zone notin ("]


def _runtime(name: str, *replicated: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name},
            "spec": {"template": {"spec": {"replicatedJobs": list(replicated)}}}}


def _replicated(name: str, *, depends_on: tuple[str, ...] = (), replicas: int = 1,
                overhead: dict[str, Any] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [{"name": name, "image": "x",
                                           "resources": {"requests": {"cpu": "1"}}}]}
    if overhead:
        pod["overhead"] = overhead
    entry: dict[str, Any] = {"name": name, "replicas": replicas,
                             "template": {"spec": {"template": {"spec": pod}}}}
    if depends_on:
        entry["dependsOn"] = [{"name": d, "status": "Complete"} for d in depends_on]
    return entry


def odd_runtimes(prefix: str) -> dict[str, tuple[dict[str, Any], str]]:
    """Runtimes the API server accepts but no job can run with, and the reason."""
    return {
        "cyclic": (_runtime(f"{prefix}-cyclic", _replicated("node", depends_on=("init",)),
                            _replicated("init", depends_on=("node",))),
                   c.REASON_INVALID_RUNTIME),
        "missing-dep": (_runtime(f"{prefix}-missing-dep",
                                 _replicated("node", depends_on=("ghost",))),
                        c.REASON_INVALID_RUNTIME),
        "empty": (_runtime(f"{prefix}-empty"), c.REASON_INVALID_RUNTIME),
        "zero-replicas": (_runtime(f"{prefix}-zero-replicas", _replicated("node", replicas=0)),
                          c.REASON_INVALID_RESOURCES),
        "negative-overhead": (_runtime(f"{prefix}-negative-overhead",
                                       _replicated("node", overhead={"cpu": "-4"})),
                              c.REASON_INVALID_RESOURCES),
    }


class JobFactory:
    """Random TrainJobs from a fixed seed, each with the reason it must end with."""

    def __init__(self, namespace: str, runtimes: dict[str, tuple[dict[str, Any], str]],
                 seed: int) -> None:
        self.namespace = namespace
        self.runtimes = runtimes
        self.random = random.Random(seed)
        self.count = 0

    def _name(self) -> str:
        self.count += 1
        if self.random.random() < 0.1:  # as long as a TrainJob name that runs may be
            return self._long_name(LONGEST_NAME)
        return f"j{self.count}"

    def _long_name(self, length: int) -> str:
        filler = "".join(self.random.choices(string.ascii_lowercase, k=length))
        return f"j{self.count}-{filler}"[:length]

    def _job(self, expected: str, *, name: str = "", **kwargs: Any) -> Job:
        annotations = kwargs.pop("annotations", {})
        if self.random.random() < 0.05:  # enormous annotations travel with the job
            annotations["example.com/blob"] = "x" * self.random.randint(10_000, 100_000)
        job = trainjob(name or self._name(), self.namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                       annotations=annotations, runtime_patches=[kwok_patch(run_seconds=0.2)],
                       **kwargs)
        return job, expected

    def normal(self) -> Job:
        cpu = self.random.choice(["1", "500m", "0.25", "2", 1, "1500m"])
        return self._job(COMPLETE, num_nodes=self.random.choice([None, 1, 2]),
                         resources_per_node={"requests": {"cpu": cpu, "memory": "1Gi"}})

    def odd(self) -> Job:
        makers: list[Callable[[], Job]] = [
            self._bad_quantity, self._bad_nodes, self._unknown_runtime, self._odd_runtime,
            self._invalid_selector, self._selector_matching_nothing, self._too_big,
            self._offered_nowhere, self._huge_request, self._name_too_long,
        ]
        return self.random.choice(makers)()

    def _bad_quantity(self) -> Job:
        resource = self.random.choice(["cpu", "memory", "nvidia.com/gpu", "example.com/x"])
        where = self.random.choice(["requests", "limits"])
        value = self.random.choice(BAD_QUANTITIES)
        return self._job(c.REASON_INVALID_RESOURCES,
                         resources_per_node={where: {resource: value}})

    def _huge_request(self) -> Job:
        """A quantity the manager's Trainer stores as the largest int64: valid, and more
        than any worker has."""
        resource = self.random.choice(["cpu", "memory", "nvidia.com/gpu"])
        return self._job(c.REASON_UNSCHEDULABLE,
                         resources_per_node={"requests": {resource: "9Ei"}})

    def _name_too_long(self) -> Job:
        """A valid TrainJob name too long for the names its JobSet would give its pods."""
        self.count += 1
        return self._job(c.REASON_INVALID_TRAINJOB, name=self._long_name(63))

    def _bad_nodes(self) -> Job:
        return self._job(c.REASON_INVALID_RESOURCES,
                         num_nodes=self.random.choice([0, -1, -(2**31)]))

    def _unknown_runtime(self) -> Job:
        return self._job(c.REASON_RUNTIME_NOT_FOUND, runtime=f"no-such-{self.count}")

    def _odd_runtime(self) -> Job:
        runtime, reason = self.runtimes[self.random.choice(sorted(self.runtimes))]
        return self._job(reason, runtime=runtime["metadata"]["name"])

    def _invalid_selector(self) -> Job:
        selector = self.random.choice(INVALID_SELECTORS)
        return self._job(c.REASON_INVALID_CLUSTER_SELECTOR,
                         annotations={c.ANNOTATION_CLUSTER_SELECTOR: selector})

    def _selector_matching_nothing(self) -> Job:
        return self._job(c.REASON_UNSCHEDULABLE,
                         annotations={c.ANNOTATION_CLUSTER_SELECTOR: "gpu=none-anywhere"})

    def _too_big(self) -> Job:
        return self._job(c.REASON_UNSCHEDULABLE, num_nodes=self.random.randint(1, 5000),
                         resources_per_node={"requests": {"cpu": "17"}})

    def _offered_nowhere(self) -> Job:
        return self._job(c.REASON_UNSCHEDULABLE,
                         resources_per_node={"limits": {"example.com/fpga": "1"}})


def outcome(job: dict[str, Any]) -> str:
    """`Complete`, or the reason of the job's Dispatched condition ('' while none)."""
    conditions = (job.get("status") or {}).get("conditions") or []
    if any(x["type"] == COMPLETE and x["status"] == "True" for x in conditions):
        return COMPLETE
    return next((x["reason"] for x in conditions if x["type"] == c.CONDITION_DISPATCHED), "")


async def test_fuzzed_trainjobs_end_in_named_reasons_and_normal_ones_complete(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str],
) -> None:
    runtimes = odd_runtimes(namespace)
    runtime_api = Resource(admin_clients["manager"], CLUSTER_TRAINING_RUNTIMES)
    for kind, (runtime, _) in list(runtimes.items()):
        try:
            await runtime_api.create(runtime)
        except Exception as error:  # the Trainer's webhook refused it: no job can name it
            assert status_of(error) in (400, 403, 422), error
            del runtimes[kind]
    dispatcher = await start_dispatcher(workers={"static": [
        {"name": w, "kubeconfig": worker_kubeconfigs[w], "quota": QUOTA} for w in WORKERS]})
    quotas = {w: parse_vector(QUOTA) for w in WORKERS}
    violations: list[str] = []

    async def watch_ledger() -> None:
        while True:
            violations.extend(dispatcher.ledger.violations(quotas))
            await asyncio.sleep(0.01)

    factory = JobFactory(namespace, runtimes, seed=20261202)
    jobs = [factory.odd() for _ in range(ODD_JOBS)] + [factory.normal()
                                                      for _ in range(NORMAL_JOBS)]
    factory.random.shuffle(jobs)
    expected = {job["metadata"]["name"]: reason for job, reason in jobs}
    manager = Resource(admin_clients["manager"], TRAINJOBS)
    limit = asyncio.Semaphore(16)

    refused: dict[str, str] = {}

    async def create(job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        async with limit:
            try:
                await manager.create(job, namespace=namespace)
            except Exception as error:  # refused at the door, with the reason said there
                if status_of(error) not in (400, 403, 422):
                    raise
                refused[name] = str(error)

    ledger_watch = asyncio.create_task(watch_ledger())
    try:
        await asyncio.gather(*(create(job) for job, _ in jobs))
        assert not [n for n in refused if expected[n] == COMPLETE], refused
        for name in refused:
            del expected[name]

        async def all_ended() -> bool:
            listed = (await manager.list(namespace=namespace))["items"]
            seen = {job["metadata"]["name"]: outcome(job) for job in listed}
            return seen == expected
        try:
            await eventually(all_ended, timeout=90, interval=1.0)
        except AssertionError:
            listed = (await manager.list(namespace=namespace))["items"]
            wrong = Counter((expected[j["metadata"]["name"]], outcome(j)) for j in listed
                            if outcome(j) != expected[j["metadata"]["name"]])
            pytest.fail(f"jobs not in their expected state (expected, seen): {wrong}")
        assert not violations, violations[:5]
        assert not any(task.done() for task in dispatcher_tasks(start_dispatcher))
        assert Counter(expected.values())[COMPLETE] == NORMAL_JOBS

        async def all_left() -> bool:  # the clean-up follows each job's final status
            listed = (await manager.list(namespace=namespace))["items"]
            return not any(c.FINALIZER in (j["metadata"].get("finalizers") or [])
                           for j in listed)
        await eventually(all_left, timeout=30)
        assert not await check_invariants(admin_clients, namespace,
                                          workers={w: QUOTA for w in WORKERS},
                                          origin=namespace)
        assert dispatcher.ledger.used("worker-a") == {} and dispatcher.ledger.used(
            "worker-b") == {}
    finally:
        ledger_watch.cancel()
        await asyncio.gather(ledger_watch, return_exceptions=True)
        for runtime, _ in runtimes.values():
            await runtime_api.delete(runtime["metadata"]["name"])


def dispatcher_tasks(runner: StartDispatcher) -> list[asyncio.Task[None]]:
    return list(runner.tasks.values())
