"""The snapshot reader on plain caches: which record is the job's and which a leftover,
where an earlier version's placement points, the copies of a job on other workers, and
the demand (remembered per job generation and runtime version, and as the worker's own
runtime makes it). No API server: the caches are filled by hand, never run."""

from __future__ import annotations

import copy
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from devkit.factories import trainjob
from devkit.fakeclock import FakeClock
from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS, PlacementRecord, placement_body
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.claim import Claim
from dispatcher.config import DispatcherConfig
from dispatcher.controllers.jobs.memory import JobMemories
from dispatcher.controllers.jobs.priority import PriorityCache
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.jobs.snapshot import Absent, Claimed, SnapshotReader
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.controllers.workers import WorkerConnection
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.informer import object_key
from dispatcher.placement.ledger import Ledger
from dispatcher.placement.options import PlacementPolicy, QueueingStrategy
from tests.unit.fakes import FakeClient, FakeRegistry, cache, worker

JSON = dict[str, Any]
KIND = TrainJobKind()
SYSTEM = "trainjob-dispatcher"
CONFIG = DispatcherConfig.model_validate({"namespace": SYSTEM, "mirror": {"origin": "o"}})
RUNTIME: JSON = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "samples"
                                / "clustertrainingruntime-torch.yaml").read_text())
RUNTIME["metadata"]["resourceVersion"] = "1"


def job(uid: str = "uid-1", **kw: Any) -> JSON:
    """2 nodes of 2 CPU each (4 CPU), or of what the runtime asks with `per_node=None`."""
    per_node = kw.pop("per_node", {"requests": {"cpu": "2"}})
    body = trainjob("j", "ns", managed_by=MANAGED_BY_MULTIKUEUE, num_nodes=2,
                    resources_per_node=per_node, **kw)
    body["metadata"].update(uid=uid, generation=1, resourceVersion="5")
    return body


def mirror(uid: str = "uid-1", demand: str = "cpu=4,pods=2") -> JSON:
    body = KIND.build_mirror(job(uid), origin="o", local_queue="")
    body["metadata"]["uid"] = f"mirror-of-{uid}"
    body["metadata"]["annotations"][c.ANNOTATION_DEMAND] = demand
    return body


def record(uid: str = "uid-1", worker_name: str = "w") -> PlacementRecord:
    return PlacementRecord(uid=uid, key="ns/j", worker=worker_name,
                           demand={"cpu": Fraction(4), "pods": Fraction(2)})


def connection(name: str, clock: FakeClock, mirrors: dict[str, JSON] | None = None,
               runtime: JSON | None = RUNTIME) -> WorkerConnection:
    """A usable worker whose mirror and runtime caches hold what the test says."""
    conn = worker(name, clock)
    conn.mirrors = cache(TRAINJOBS, mirrors or {})
    conn.runtimes = {"ClusterTrainingRuntime": cache(
        CLUSTER_TRAINING_RUNTIMES, {runtime["metadata"]["name"]: runtime} if runtime else {})}
    return conn


class Setup:
    def __init__(self, *, jobs: list[JSON], records: list[PlacementRecord] | None = None,
                 workers: list[WorkerConnection] | None = None,
                 clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.ledger = Ledger()
        records = records or []
        self.records = PlacementRecords(cache(PLACEMENTS, {
            f"{SYSTEM}/{r.uid}": placement_body(r, namespace=SYSTEM) for r in records},
            namespace=SYSTEM))
        for r in records:  # the index follows the informer's events, fed here by hand
            self.records.remember(placement_body(r, namespace=SYSTEM))
        scheduling = SchedulingLoop(ledger=self.ledger, workers=list,
                                    policy=PlacementPolicy.MOST_FREE,
                                    strategy=QueueingStrategy.BEST_EFFORT_FIFO,
                                    on_decision=lambda decision: None)
        self.reader = SnapshotReader(
            config=CONFIG, claim=Claim(CONFIG.claim), kind=KIND,
            trainjobs=cache(TRAINJOBS, {object_key(j): j for j in jobs}), records=self.records,
            runtimes={"ClusterTrainingRuntime": cache(
                CLUSTER_TRAINING_RUNTIMES, {RUNTIME["metadata"]["name"]: RUNTIME})},
            registry=FakeRegistry(*(workers or [])),  # type: ignore[arg-type]
            ledger=self.ledger, scheduling=scheduling,
            priorities=PriorityCache(FakeClient().as_client(), clock=self.clock),
            clock=self.clock)

    async def read(self, memories: JobMemories | None = None) -> Any:
        return await self.reader.read("ns/j", memories or JobMemories())


async def test_of_two_records_the_jobs_own_is_its_record_the_other_a_leftover() -> None:
    """Deleted and re-created under the same name: the old job's record is cleaned up
    first; once the job is gone, its record is the leftover."""
    setup = Setup(jobs=[job("uid-new")], records=[record("uid-old"), record("uid-new")],
                  workers=[connection("w", FakeClock(), {"ns/j": mirror("uid-old")})])
    s = await setup.read()
    assert isinstance(s, Claimed) and s.record is not None and s.record.uid == "uid-new"
    assert s.leftover is not None and s.leftover.record.uid == "uid-old"
    assert s.leftover.mirror is not None  # the old job's mirror, ours by its manager UID
    gone = await Setup(jobs=[], records=[record("uid-old")]).read()
    assert isinstance(gone, Absent) and gone.leftover is not None
    assert gone.leftover.record.uid == "uid-old" and gone.leftover.worker is None


async def test_an_earlier_versions_placement_is_only_where_to_look() -> None:
    """No record, our finalizer and a cluster annotation: the worker it names is a hint
    (claimed or not); the object there is handed over for decide to judge."""
    clock = FakeClock()
    legacy = job(annotations={c.ANNOTATION_CLUSTER: "w"})
    legacy["metadata"]["finalizers"] = [c.FINALIZER]
    workers = [connection("w", clock, {"ns/j": mirror()})]
    s = await Setup(jobs=[legacy], workers=workers, clock=clock).read()
    assert isinstance(s, Claimed) and s.hinted_worker is not None
    assert s.hinted_worker.name == "w" and s.record is None
    unclaimed = copy.deepcopy(legacy)
    del unclaimed["spec"]["managedBy"]
    a = await Setup(jobs=[unclaimed], workers=workers, clock=clock).read()
    assert isinstance(a, Absent) and a.unclaimed is not None
    assert a.hinted_worker is not None and a.hinted_mirror == mirror()
    no_finalizer = copy.deepcopy(unclaimed)
    del no_finalizer["metadata"]["finalizers"]
    b = await Setup(jobs=[no_finalizer], workers=workers, clock=clock).read()
    assert isinstance(b, Absent) and b.hinted_worker is None and b.hinted_mirror is None


async def test_copies_on_other_workers_and_what_each_holds() -> None:
    clock = FakeClock()
    setup = Setup(jobs=[job()], records=[record()], clock=clock, workers=[
        connection("w", clock), connection("v", clock, {"ns/j": mirror(demand="cpu=6")})])
    setup.ledger.mirror_seen("v", "uid-1", "ns/j", {"cpu": Fraction(6)})
    s = await setup.read()
    assert isinstance(s, Claimed) and s.placed_on == "w" and s.mirror is None
    [elsewhere] = s.elsewhere
    assert elsewhere.worker.name == "v" and elsewhere.holds == {"cpu": Fraction(6)}


async def test_the_demand_is_remembered_per_generation_and_runtime_version() -> None:
    setup = Setup(jobs=[job()])
    first = await setup.read()
    assert isinstance(first, Claimed) and first.demand is not None
    assert first.demand_version == (1, "1")
    assert first.demand["cpu"] == 4  # 2 nodes x 2 CPU
    memories = JobMemories()
    remembered = {"cpu": Fraction(99)}
    memories.of("uid-1").demand = ((1, "1"), remembered)
    again = await setup.read(memories)
    assert isinstance(again, Claimed) and again.demand is remembered  # not computed again
    memories.of("uid-1").demand = ((1, "0"), remembered)  # another runtime version
    fresh = await setup.read(memories)
    assert isinstance(fresh, Claimed) and fresh.demand == first.demand


async def test_placed_with_no_mirror_the_workers_own_runtime_gives_the_demand_there() -> None:
    clock = FakeClock()
    bigger = copy.deepcopy(RUNTIME)  # worker w's admin: 3 CPU a node, not 1
    bigger["metadata"]["resourceVersion"] = "9"
    node = bigger["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    node["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    plain = job(per_node=None)  # asks what the runtime says
    same = await Setup(jobs=[plain], records=[record()], clock=clock,
                       workers=[connection("w", clock)]).read()
    assert isinstance(same, Claimed) and same.demand is not None
    assert same.demand_there == same.demand and same.demand["cpu"] == 2
    edited = await Setup(jobs=[plain], records=[record()], clock=clock,
                         workers=[connection("w", clock, runtime=bigger)]).read()
    assert isinstance(edited, Claimed) and edited.demand_there is not None
    assert edited.demand_there["cpu"] == 6 and edited.demand == same.demand
    gone = await Setup(jobs=[plain], records=[record()], clock=clock,
                       workers=[connection("w", clock, runtime=None)]).read()
    assert isinstance(gone, Claimed) and gone.demand_there is None
    assert gone.cannot_run_there == "has no ClusterTrainingRuntime 'torch-distributed'"
    mirrored = await Setup(jobs=[plain], records=[record()], clock=clock,
                           workers=[connection("w", clock, {"ns/j": mirror()})]).read()
    assert isinstance(mirrored, Claimed) and mirrored.demand_there is None
