"""Kueue on the manager, pure: the gate a Workload puts on its job, our check's next state,
the Active condition of our AdmissionChecks, and the rows of `decide` that ask the gate
instead of the job's `suspend` (which is Kueue's in this mode)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from devkit.factories import condition
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE
from dispatcher.claim import Claim
from dispatcher.config import CheckReadyWhen, ClaimConfig
from dispatcher.controllers.admission.decide import (
    Activity,
    CheckUpdate,
    WorkloadJob,
    active_condition,
    active_of,
    check_update,
    unclaimed_message,
)
from dispatcher.controllers.admission.gate import Gate, gate_of
from dispatcher.controllers.jobs import actions as a
from dispatcher.controllers.jobs.decide import WAITING_QUIET_SECONDS
from tests.unit.test_decide import (
    CONFIG,
    KIND,
    WALL,
    JobMemory,
    decide,
    job,
    mirror,
    pending,
    placed,
)

CHECK = "dispatch"
OURS = {CHECK}
CONTROLLER = "dispatcher.trainjob.io/multicluster"
QUEUED_JOB = {**job(suspend=True)}
QUEUED_JOB["metadata"]["labels"] = {c.LABEL_KUEUE_QUEUE: "team"}


def workload(*, reserved: bool = True, state: str | None = "Pending", message: str = "",
             active: bool = True, evicted: bool | str = False, finished: bool = False
             ) -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": str(reserved), "reason": "r",
                   "message": "" if reserved else "insufficient quota"}]
    if evicted:
        reason = evicted if isinstance(evicted, str) else "Preempted"
        conditions.append({"type": "Evicted", "status": "True", "reason": reason,
                           "message": "preempted by a higher priority"})
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded",
                           "message": ""})
    checks = ([] if state is None else
              [{"name": CHECK, "state": state, "message": message,
                "lastTransitionTime": "2026-01-01T00:00:00Z"},
               {"name": "other", "state": "Pending", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}])
    return {"metadata": {"name": "trainjob-j-1", "namespace": "ns", "resourceVersion": "3"},
            "spec": {"active": active, "queueName": "team"},
            "status": {"conditions": conditions, "admissionChecks": checks}}


def gate(wl: dict[str, Any] | None, obj: dict[str, Any] = QUEUED_JOB) -> Gate:
    return gate_of(obj, wl, OURS, controller=CONTROLLER)


def test_the_gate_opens_only_with_quota_reserved_and_our_check_pending() -> None:
    assert gate(workload()) == Gate(admits=True, holds=True)
    ready = gate(workload(state="Ready"))
    assert (ready.admits, ready.holds) == (False, True)
    for closed, reason in (
        (gate(None), c.REASON_WAITING_FOR_KUEUE),
        (gate(None, job(suspend=True)), c.REASON_WAITING_FOR_KUEUE),
        (gate(workload(reserved=False)), c.REASON_WAITING_FOR_KUEUE),
        (gate(workload(reserved=False, evicted=True)), c.REASON_WITHDRAWN_BY_KUEUE),
        # Kueue evicts (preemption, our Retry) first and resets every check to Pending;
        # it releases the quota only once the job stops running: withdraw it now.
        (gate(workload(evicted=True)), c.REASON_WITHDRAWN_BY_KUEUE),
        (gate(workload(state="Ready", evicted="AdmissionCheck")), c.REASON_WITHDRAWN_BY_KUEUE),
        (gate(workload(state=None)), c.REASON_NO_ADMISSION_CHECK),
        (gate(workload(state="Retry")), c.REASON_WAITING_FOR_KUEUE),
        (gate(workload(state="Rejected", message="too big")), c.REASON_CHECK_REJECTED),
        (gate(workload(state="Rejected", active=False)), c.REASON_CHECK_REJECTED),
        (gate(workload(active=False)), c.REASON_WITHDRAWN_BY_KUEUE),
        (gate(workload(active=False, evicted="DeactivatedDueToAdmissionCheck")),
         c.REASON_CHECK_REJECTED),
    ):
        assert (closed.admits, closed.holds, closed.reason) == (False, False, reason), closed
    assert "queue-name" in gate(None, job(suspend=True)).message
    assert "insufficient quota" in gate(workload(reserved=False)).message
    assert "preempted by a higher priority" in gate(workload(evicted=True)).message


MIRRORED = WorkloadJob(placed_on="w", mirrored=True)
UNSCHEDULABLE = WorkloadJob(why=(c.REASON_UNSCHEDULABLE,
                                 "needs cpu 80, the largest worker has 64"))
EVICTED = WorkloadJob(why=(c.REASON_WAITING_FOR_QUOTA, "no worker has room"),
                      taken_off=(c.REASON_EVICTED, "evicted on worker w; requeued"))


@pytest.mark.parametrize(("wl", "state", "expected"), [
    (workload(), MIRRORED, CheckUpdate(CHECK, "Ready", "placed on worker w by "
                                                       "trainjob-dispatcher")),
    (workload(state="Ready", message="placed on worker w by trainjob-dispatcher"), MIRRORED,
     None),
    (workload(), WorkloadJob(placed_on="w"), None),
    (workload(state="Ready"), WorkloadJob(placed_on="w"), None),
    (workload(state="Ready"), EVICTED,
     CheckUpdate(CHECK, "Retry", "taken off its worker: evicted on worker w; requeued")),
    (workload(state="Ready"), WorkloadJob(),
     CheckUpdate(CHECK, "Retry", "taken off its worker: no longer placed")),
    (workload(), WorkloadJob(placed_on="w", why=(c.REASON_WAITING_FOR_QUOTA, "no room")),
     None),
    (workload(), UNSCHEDULABLE,
     CheckUpdate(CHECK, "Rejected", "no worker can hold it: needs cpu 80, the largest "
                                    "worker has 64")),
    (workload(), WorkloadJob(why=(c.REASON_WAITING_FOR_QUOTA, "no room")),
     CheckUpdate(CHECK, "Pending", "no room")),
    (workload(message="no room"),
     WorkloadJob(why=(c.REASON_WAITING_FOR_QUOTA, "no room")), None),
    (workload(), WorkloadJob(), None),
    (workload(), None, None),
    (workload(state="Retry"), EVICTED, None),
    (workload(state="Rejected"), UNSCHEDULABLE, None),
    (workload(reserved=False), MIRRORED, None),
    (workload(evicted=True), MIRRORED, None),
    (workload(active=False), MIRRORED, None),
    (workload(finished=True), MIRRORED, None),
    (workload(state=None), MIRRORED, None),
], ids=["mirrored: Ready", "Ready already", "placed, no mirror yet", "Ready, mirror not seen",
        "Ready, taken off: Retry with the record's why", "Ready, record says no why",
        "placed meanwhile: no Pending word", "never fits: Rejected", "waits: Pending with why",
        "Pending says it already", "nothing to say yet", "job unknown", "Retry is Kueue's",
        "Rejected is Kueue's", "no quota", "evicted", "deactivated", "finished",
        "not our check"])
def test_our_check(wl: dict[str, Any], state: WorkloadJob | None,
                   expected: CheckUpdate | None) -> None:
    assert check_update(wl, OURS, state) == expected


WAITS_ON_WORKER = WorkloadJob(placed_on="w", mirrored=True, why=(
    c.REASON_WAITING_FOR_ADMISSION, "placed on worker w, waiting for admission in "
    "ClusterQueue cq: insufficient quota"))


@pytest.mark.parametrize(("wl", "state", "expected"), [
    (workload(), WAITS_ON_WORKER,
     CheckUpdate(CHECK, "Pending", "placed on worker w, waiting for admission in "
                                   "ClusterQueue cq: insufficient quota")),
    (workload(), WorkloadJob(placed_on="w", mirrored=True),
     CheckUpdate(CHECK, "Pending", "placed on worker w, waiting for its Kueue to admit it")),
    (workload(), WorkloadJob(placed_on="w", mirrored=True, admitted=True),
     CheckUpdate(CHECK, "Ready", "placed on worker w by trainjob-dispatcher")),
    (workload(state="Ready"), WAITS_ON_WORKER, None),
], ids=["waits in the worker's Kueue: Pending with where", "no word yet", "admitted: Ready",
        "Ready stays Ready"])
def test_our_check_ready_once_the_worker_admits(wl: dict[str, Any], state: WorkloadJob,
                                                 expected: CheckUpdate | None) -> None:
    assert check_update(wl, OURS, state, ready_when=CheckReadyWhen.WORKER_ADMITTED) == expected
    if state.admitted or wl["status"]["admissionChecks"][0]["state"] == "Ready":
        return
    assert check_update(wl, OURS, state) == CheckUpdate(
        CHECK, "Ready", "placed on worker w by trainjob-dispatcher"), "the default: on create"


FINISHED_UNPLACED = WorkloadJob(finished=True, why=(c.REASON_PLACED, "Complete on worker w"))


@pytest.mark.parametrize(("wl", "state"), [
    (workload(state="Ready"), FINISHED_UNPLACED),
    (workload(state="Ready"), WorkloadJob(finished=True)),
    (workload(state="Ready"), WorkloadJob(finished=True, placed_on="w")),
    (workload(), WorkloadJob(finished=True)),
], ids=["mirror and record gone, Kueue not yet Finished", "no word at all",
        "record still there", "Pending"])
def test_a_finished_job_never_moves_our_check(wl: dict[str, Any], state: WorkloadJob) -> None:
    """The jobs controller deletes a finished job's mirror, then its record, while Kueue
    may not have marked the Workload Finished yet: a Retry then would run it again."""
    assert check_update(wl, OURS, state) is None
    assert check_update(wl, OURS, state, ready_when=CheckReadyWhen.WORKER_ADMITTED) is None
    unfinished = WorkloadJob(why=state.why, placed_on=state.placed_on)
    if wl["status"]["admissionChecks"][0]["state"] == "Ready" and not state.placed_on:
        assert check_update(wl, OURS, unfinished) is not None, "the case is not vacuous"


CLAIM = Claim(ClaimConfig.model_validate({"namespaces": ["ns"], "labelSelector": "team=a"}))


def claimed_job(**changes: Any) -> dict[str, Any]:
    obj = job(suspend=True)
    obj["metadata"]["labels"] = {c.LABEL_KUEUE_QUEUE: "team", "team": "a"}
    obj["spec"]["managedBy"] = MANAGED_BY_MULTIKUEUE
    for path, value in changes.items():
        section, key = path.split("__")
        target = obj["metadata"] if section == "metadata" else obj["spec"]
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return obj


@pytest.mark.parametrize(("obj", "says"), [
    (claimed_job(spec__managedBy=None), "spec.managedBy is not kueue.x-k8s.io/multikueue"),
    (claimed_job(spec__managedBy="trainer.kubeflow.org/trainjob-controller"),
     "spec.managedBy is not"),
    (claimed_job(metadata__namespace="other"), "namespace other is not in claim.namespaces"),
    (claimed_job(metadata__labels={c.LABEL_KUEUE_QUEUE: "team"}), "claim.labelSelector"),
], ids=["no managedBy", "the Trainer's managedBy", "another namespace", "labels not selected"])
def test_a_job_the_dispatcher_does_not_claim_is_rejected_saying_why(
        obj: dict[str, Any], says: str) -> None:
    """Kueue defaults managedBy only under MultiKueue's own checks: a job under ours
    without it would hold its quota with a silent Pending check for ever."""
    assert CLAIM.claims(claimed_job())
    refusal = CLAIM.refusal(obj)
    assert says in refusal
    state = WorkloadJob(refusal=refusal, managed_by=CLAIM.missing_managed_by(obj))
    update = check_update(workload(), OURS, state)
    assert update is not None and update.state == "Rejected", update
    assert refusal in update.message and "release its quota" in update.message
    told_how = f"with spec.managedBy: {MANAGED_BY_MULTIKUEUE}" in update.message
    assert told_how == refusal.startswith("spec.managedBy"), update.message
    assert told_how == (c.LABEL_DISPATCH in update.message), update.message
    assert check_update(workload(state="Ready"), OURS, state) == update
    for untouched in (workload(state="Rejected"), workload(state="Retry"),
                      workload(reserved=False), workload(active=False)):
        assert check_update(untouched, OURS, state) is None
    assert update.message == unclaimed_message(refusal, state.managed_by)


def test_the_fix_names_the_managed_by_this_dispatcher_claims() -> None:
    own = Claim(ClaimConfig.model_validate({"managedBy": "example.com/dispatcher"}))
    obj = claimed_job()
    assert own.missing_managed_by(obj) == "example.com/dispatcher"
    assert CLAIM.missing_managed_by(obj) == ""
    update = check_update(workload(), OURS, WorkloadJob(refusal=own.refusal(obj),
                                                     managed_by=own.missing_managed_by(obj)))
    assert update is not None
    assert "with spec.managedBy: example.com/dispatcher" in update.message, update.message
    assert MANAGED_BY_MULTIKUEUE not in update.message, update.message


def test_active_condition_says_why_and_is_written_only_on_change() -> None:
    assert active_of(registered=0, usable=[]).reason == c.REASON_NO_WORKERS
    assert active_of(registered=2, usable=[]).reason == c.REASON_NO_ACTIVE_WORKER
    bad = active_of(registered=2, usable=["a"], parameters={
        "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "fleet"})
    assert (bad.active, bad.reason) == (False, c.REASON_PARAMETERS_NOT_SUPPORTED)
    assert "MultiKueueConfig fleet" in bad.message and "spec.parameters" in bad.message
    active = active_of(registered=2, usable=["a"])
    assert active == Activity(True, c.REASON_CHECK_ACTIVE, "dispatching to 1 of 2 worker "
                                                           "clusters")
    new = active_condition(None, active, now="T1", generation=1)
    assert new is not None and new["status"] == "True" and new["lastTransitionTime"] == "T1"
    assert active_condition({"conditions": [new]}, active, now="T2", generation=1) is None
    moved = active_condition({"conditions": [new]}, active_of(registered=2, usable=["a", "b"]),
                             now="T2", generation=1)
    assert moved is not None and moved["lastTransitionTime"] == "T1"


OPEN = Gate(admits=True, holds=True)
HELD = Gate(admits=False, holds=True, reason=c.REASON_WAITING_FOR_KUEUE, message="ready")
SHUT = Gate(admits=False, holds=False, reason=c.REASON_WITHDRAWN_BY_KUEUE,
            message="Workload w evicted by Kueue (Preempted)")


def test_kueues_suspension_is_not_the_users() -> None:
    memory = JobMemory()
    queued = decide(pending(job=job(suspend=True), gate=OPEN), memory, CONFIG, kind=KIND)
    assert isinstance(queued, a.Enqueue)
    assert decide(pending(job=job(suspend=True), gate=SHUT), memory, CONFIG, kind=KIND) == \
        a.Wait(SHUT.reason, SHUT.message)
    assert decide(pending(job=job(suspend=True)), memory, CONFIG, kind=KIND) == \
        a.Wait(c.REASON_SUSPENDED, "suspended: not dispatched")
    suspended = job(placed=True, suspend=True)
    assert decide(placed(job=suspended, gate=HELD), memory, CONFIG, kind=KIND) == \
        a.CreateMirror("w", dict(placed().record.demand))  # type: ignore[union-attr]
    withdrawn = decide(placed(job=suspended, gate=SHUT, mirror=mirror()), memory, CONFIG,
                       kind=KIND)
    assert withdrawn == a.Unplace("w", SHUT.reason, f"{SHUT.message}: mirror removed and quota "
                                  "released", eviction=False, mirror=mirror())


def test_a_mirror_of_a_job_kueue_suspends_is_not_suspended() -> None:
    assert "suspend" not in KIND.build_mirror(job(suspend=True), origin="o",
                                              local_queue="")["spec"]


def test_kueues_first_steps_with_a_new_job_are_not_shown() -> None:
    """A job younger than the quiet period shows no wait for the manager's Kueue (it is
    still withdrawn from the queue at once); an older one, or one that shows something
    already, or another reason, is shown at once."""
    kueue = Gate(admits=False, holds=False, reason=c.REASON_WAITING_FOR_KUEUE,
                 message="waiting for the manager's Kueue to create its Workload")
    def created(age: float) -> dict[str, Any]:
        obj = job()
        obj["metadata"]["creationTimestamp"] = datetime.datetime.fromtimestamp(
            WALL - age, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return obj

    young = created(1)
    action = decide(pending(job=young, gate=kueue), JobMemory(), CONFIG, kind=KIND)
    assert isinstance(action, a.Wait) and action.reason == c.REASON_WAITING_FOR_KUEUE
    assert action.show_after is not None and 0 < action.show_after <= WAITING_QUIET_SECONDS
    ahead = decide(pending(job=created(-3600), gate=kueue), JobMemory(), CONFIG, kind=KIND)
    assert isinstance(ahead, a.Wait) and ahead.show_after is not None
    assert ahead.show_after <= WAITING_QUIET_SECONDS + 0.1, "a skewed clock holds no longer"
    old = decide(pending(job=created(60), gate=kueue), JobMemory(), CONFIG, kind=KIND)
    assert old == a.Wait(kueue.reason, kueue.message)
    shown = dict(young, status={"conditions": [condition(
        c.CONDITION_DISPATCHED, c.REASON_PREEMPTED, "preempted", status="False")]})
    assert decide(pending(job=shown, gate=kueue), JobMemory(), CONFIG, kind=KIND) == \
        a.Wait(kueue.reason, kueue.message)
    assert decide(pending(job=young, gate=SHUT), JobMemory(), CONFIG, kind=KIND) == \
        a.Wait(SHUT.reason, SHUT.message)
