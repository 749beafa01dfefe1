"""A job's logs, read from the manager with `dispatcher logs`, on the real chain.

A manager and one worker that runs the real Trainer and JobSet, kube-scheduler and kwok
with two fake nodes. kwok plays the kubelet: the worker's API server asks it for
`pods/log` at the nodes' kubelet port, and it answers from files (`devkit.localcluster.
pod_logs`), each pod's own lines here. The caller is a real RBAC-limited identity on the
manager (a ServiceAccount's token, bound to a Role that may get TrainJobs in one
namespace); it holds no credentials for the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.identities import namespace_user_token
from devkit.localcluster.pod_logs import DEFAULT_LINES, append_lines, serve_pod_logs
from devkit.localcluster.trainer import NodePool, chain_crd_files, end_pods, kwok_timed
from dispatcher import logs_cli
from dispatcher.api import constants as c
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.app import Dispatcher
from dispatcher.cli import build_parser
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import NAMESPACES, PODS, Resource
from tests.integration.conftest import (
    SAMPLES,
    DispatcherRunner,
    connect_all,
    eventually,
    fresh_namespace,
    shut_down,
)
from tests.integration.rbac import namespace_editor

pytestmark = pytest.mark.integration
WORKER = "worker-a"
NODES = NodePool(count=2, allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"})
RUNTIME = "torch-until-ended"


class Plane:
    def __init__(self, plane: LocalControlPlane, clients: dict[str, ClusterClient]) -> None:
        self.plane = plane
        self.clients = clients

    @property
    def pod_logs(self) -> Path:
        trainer = self.plane.clusters[WORKER].trainer
        assert trainer is not None and trainer.pod_logs is not None
        return trainer.pod_logs


@pytest_asyncio.fixture(scope="module")
async def plane() -> AsyncIterator[Plane]:
    local = LocalControlPlane()
    clients: dict[str, ClusterClient] = {}
    try:
        await local.start(("manager", WORKER), controllers=(WORKER,),
                          crd_files=chain_crd_files())
        await local.clusters[WORKER].start_trainer(NODES)
        clients = await connect_all(local)
        body = kwok_timed(yaml.safe_load(
            (SAMPLES / "clustertrainingruntime-torch.yaml").read_text()), run_seconds=None)
        body["metadata"]["name"] = RUNTIME
        for client in clients.values():
            await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(body, field_manager="tests")
        yield Plane(local, clients)
    finally:
        await shut_down(local, clients)


@pytest_asyncio.fixture
async def namespace(plane: Plane) -> str:
    return await fresh_namespace(plane.clients, "l")


@pytest_asyncio.fixture
async def dispatchers(plane: Plane, namespace: str) -> AsyncIterator[DispatcherRunner]:
    runner = DispatcherRunner(plane.plane, namespace)
    yield runner
    await runner.stop()


async def start(dispatchers: DispatcherRunner, plane: Plane, *, retain: float,
                namespaces: list[str] | None = None) -> Dispatcher:
    return await dispatchers(
        claim={"namespaces": namespaces or [dispatchers.namespace]},
        mirror={"origin": dispatchers.namespace, "retainFinishedSeconds": retain},
        server={"logsPort": 0},
        workers={"static": [{"name": WORKER, "quota": NODES.total(), "kubeconfig": str(
            plane.plane.clusters[WORKER].kubeconfig_path)}]})


async def reader_token(manager: ClusterClient, namespace: str) -> str:
    """The token of a ServiceAccount that may get, list and create TrainJobs in
    `namespace` and do nothing else on the manager."""
    return await namespace_user_token(manager, namespace, name="reader",
                                      verbs=("get", "list", "watch", "create"))


async def running_pods(worker: ClusterClient, namespace: str, name: str, count: int
                       ) -> list[dict[str, Any]] | None:
    pods = [p for p in (await Resource(worker, PODS).list(
        namespace=namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"))["items"]
        if p["status"].get("phase") == "Running"]
    return sorted(pods, key=lambda p: p["metadata"]["labels"].get(
        "batch.kubernetes.io/job-completion-index", "")) if len(pods) == count else None


async def cli(capsys: pytest.CaptureFixture[str], dispatcher: Dispatcher, token: str,
              *argv: str) -> tuple[int, str, str]:
    """`dispatcher logs ARGV` against the dispatcher's logs endpoint: (code, out, err)."""
    assert dispatcher.logs_server is not None
    args = build_parser().parse_args(
        ["logs", *argv, "--server", f"http://127.0.0.1:{dispatcher.logs_server.port}",
         "--token", token])
    capsys.readouterr()
    try:
        code = await logs_cli.run(args)
    except logs_cli.LogsError as error:
        out, _ = capsys.readouterr()
        return 2, out, str(error)
    out, err = capsys.readouterr()
    return code, out, err


def lines_of(rank: int, *steps: int) -> list[str]:
    return [f"rank {rank} step {step} loss {1 / (step + rank + 1):.3f}" for step in steps]


async def test_a_two_node_jobs_logs_while_it_runs_and_after_it_finished(
    plane: Plane, dispatchers: DispatcherRunner, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manager, worker = plane.clients["manager"], plane.clients[WORKER]
    dispatcher = await start(dispatchers, plane, retain=15)
    token = await reader_token(manager, namespace)
    jobs = Resource(manager, TRAINJOBS)
    await jobs.create(trainjob("two", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                               runtime=RUNTIME, num_nodes=2,
                               resources_per_node={"requests": {"cpu": "4"}}),
                      namespace=namespace)
    pods = await eventually(lambda: running_pods(worker, namespace, "two", 2), timeout=60)
    files = [(await serve_pod_logs(worker, plane.pod_logs, pod, {"node": lines_of(rank, 1, 2)})
              )["node"] for rank, pod in enumerate(pods)]

    async def all_lines() -> str | None:
        code, out, _ = await cli(capsys, dispatcher, token, f"{namespace}/two")
        return out if code == 0 and "rank 1 step 2" in out and "rank 0 step 2" in out else None

    out = await eventually(all_lines, timeout=20, interval=0.3)  # kwok sees its Logs
    names = [p["metadata"]["name"] for p in pods]
    assert out.splitlines() == [f"[{names[rank]}/node] {line}"
                                for rank in (0, 1) for line in lines_of(rank, 1, 2)]
    code, out, _ = await cli(capsys, dispatcher, token, f"{namespace}/two", "--node-rank", "1",
                             "--tail", "1")
    assert (code, out.splitlines()) == (0, lines_of(1, 2))  # one container: no prefix
    code, out, _ = await cli(capsys, dispatcher, token, f"{namespace}/two",
                             "--replicated-job", "node", "-c", "node", "--node-rank", "0")
    assert (code, out.splitlines()) == (0, lines_of(0, 1, 2))
    code, _, error = await cli(capsys, dispatcher, token, f"{namespace}/two", "-c", "nope")
    assert code == 2 and "no container nope" in error and "theirs: node" in error

    # --follow: a line written to rank 0's log arrives while the stream is open.
    followed: list[str] = []
    assert dispatcher.logs_server is not None
    url = f"http://127.0.0.1:{dispatcher.logs_server.port}/logs/{namespace}/two"

    async def follow() -> None:
        async with aiohttp.ClientSession() as session, session.get(
                url, params={"follow": "true", "nodeRank": "0"},
                headers={"Authorization": f"Bearer {token}"}) as response:
            assert response.status == 200
            async for line in response.content:
                followed.append(line.decode().rstrip("\n"))

    follower = asyncio.create_task(follow())
    try:
        await eventually(lambda: asyncio.sleep(0, len(followed) >= 2), timeout=10)
        append_lines(files[0], lines_of(0, 3))
        await eventually(lambda: asyncio.sleep(0, len(followed) >= 3), timeout=10)
        assert followed == lines_of(0, 1, 2, 3)
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower

    # Where the logs are, on the manager job while it runs.
    job = await jobs.get("two", namespace=namespace)
    assert job is not None
    dispatched = next(cond for cond in job["status"]["conditions"]
                      if cond["type"] == c.CONDITION_DISPATCHED)
    assert f"logs: dispatcher logs {namespace}/two" in dispatched["message"]
    assert "jobset.sigs.k8s.io/jobset-name=two" in dispatched["message"]

    # It finishes: its record and quota go at once, its mirror and pods stay a while.
    await eventually(lambda: end_pods(worker, namespace, "two"), timeout=10)

    async def complete() -> dict[str, Any] | None:
        found = await jobs.get("two", namespace=namespace)
        conds = {cond["type"]: cond for cond in (found or {}).get("status", {}).get(
            "conditions", [])}
        return found if conds.get("Complete", {}).get("status") == "True" else None

    job = await eventually(complete, timeout=30)
    finished_at = asyncio.get_running_loop().time()
    # The next job takes the whole worker (both nodes' cpu): the retained one holds none.
    await jobs.create(trainjob("next", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                               runtime=RUNTIME, num_nodes=2,
                               resources_per_node={"requests": {"cpu": "4"}}),
                      namespace=namespace)
    mirrors = Resource(worker, TRAINJOBS)
    await eventually(lambda: mirrors.get("next", namespace=namespace), timeout=20)
    assert await mirrors.get("two", namespace=namespace) is not None  # still kept
    code, out, _ = await cli(capsys, dispatcher, token, f"{namespace}/two", "--node-rank", "1")
    assert (code, out.splitlines()) == (0, lines_of(1, 1, 2))
    # Its time up, the mirror goes (its pods with it), then our finalizer.
    await eventually(lambda: _gone(mirrors, "two", namespace), timeout=40, interval=0.5)
    waited = asyncio.get_running_loop().time() - finished_at
    assert waited >= 10, f"the retained mirror went {waited:.1f}s after the finish"
    job = await jobs.get("two", namespace=namespace)
    assert job is not None and c.FINALIZER not in (job["metadata"].get("finalizers") or [])
    code, _, error = await cli(capsys, dispatcher, token, f"{namespace}/two")
    assert code == 2 and "no mirror of" in error
    # The next job never ran twice, and the finished one never again.
    listed = (await mirrors.list(namespace=namespace))["items"]
    assert sorted(m["metadata"]["name"] for m in listed) == ["next"]
    await eventually(lambda: end_pods(worker, namespace, "next"), timeout=30)  # room for others


async def _gone(resource: Resource, name: str, namespace: str) -> bool:
    return await resource.get(name, namespace=namespace) is None


async def test_a_user_gets_the_logs_of_their_namespace_only(
    plane: Plane, dispatchers: DispatcherRunner, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manager, worker = plane.clients["manager"], plane.clients[WORKER]
    other = f"{namespace}-other"
    for client in plane.clients.values():
        await Resource(client, NAMESPACES).create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    dispatcher = await start(dispatchers, plane, retain=0, namespaces=[namespace, other])
    token = await reader_token(manager, namespace)
    jobs = Resource(manager, TRAINJOBS)
    for where in (namespace, other):
        await jobs.create(trainjob("one", where, managed_by=MANAGED_BY_MULTIKUEUE,
                                   runtime=RUNTIME, num_nodes=1,
                                   resources_per_node={"requests": {"cpu": "1"}}),
                          namespace=where)
    for where in (namespace, other):
        await eventually(lambda w=where: running_pods(worker, w, "one", 1), timeout=60)

    async def default_lines() -> str | None:  # kwok's lines for every pod
        code, out, _ = await cli(capsys, dispatcher, token, f"{namespace}/one")
        return out if code == 0 and out.strip() else None

    assert (await eventually(default_lines, timeout=20, interval=0.3)).splitlines() == (
        DEFAULT_LINES)
    code, out, error = await cli(capsys, dispatcher, token, f"{other}/one")
    assert (code, out) == (2, "")
    assert f"may not get trainjobs one in namespace {other}" in error and "403" in error
    code, _, error = await cli(capsys, dispatcher, "not-a-token", f"{namespace}/one")
    assert code == 2 and "did not accept the token" in error and "401" in error
    assert dispatcher.logs_server is not None
    async with aiohttp.ClientSession() as session, session.get(
            f"http://127.0.0.1:{dispatcher.logs_server.port}/logs/{namespace}/one") as response:
        assert response.status == 401
    code, _, error = await cli(capsys, dispatcher, token, f"{namespace}/missing")
    assert code == 2 and f"no TrainJob {namespace}/missing" in error and "404" in error



async def test_deleting_a_finished_job_deletes_its_kept_mirror_at_once(
    plane: Plane, dispatchers: DispatcherRunner, namespace: str,
) -> None:
    """Kept for ten minutes, the finished mirror goes as soon as its job is deleted, and
    the job with it (the finalizer held it till then); nothing runs it again."""
    await start(dispatchers, plane, retain=600)
    jobs, mirrors, mirror = await _run_to_its_end(plane, namespace, "done")

    async def finished_and_kept() -> bool:
        job = await jobs.get("done", namespace=namespace)
        dispatched = next((cond for cond in (job or {}).get("status", {}).get(
            "conditions", []) if cond["type"] == c.CONDITION_DISPATCHED), {})
        return dispatched.get("reason") == c.REASON_FINISHED and "kept for 600s" in (
            dispatched.get("message", ""))

    await eventually(finished_and_kept, timeout=30)
    await asyncio.sleep(2)  # a reconcile or two later: still kept
    kept = await mirrors.get("done", namespace=namespace)
    assert kept is not None and kept["metadata"]["uid"] == mirror["metadata"]["uid"]
    await jobs.delete("done", namespace=namespace)
    await eventually(lambda: _gone(mirrors, "done", namespace), timeout=15)
    await eventually(lambda: _gone(jobs, "done", namespace), timeout=15)
    await asyncio.sleep(2)
    assert await mirrors.get("done", namespace=namespace) is None


async def test_a_namespace_editor_cannot_make_a_kept_mirror_go_early_or_run_again(
    plane: Plane, dispatchers: DispatcherRunner, namespace: str,
) -> None:
    """The kept mirror is found by the job's `cluster` annotation, which the job's editor
    may write: a real RBAC-limited editor removes it. The dispatcher then only lets go of
    its finalizer; the mirror stays, proved by the worker's labels, until its time, and
    the finished job is never placed again."""
    manager = plane.clients["manager"]
    await start(dispatchers, plane, retain=12)
    jobs, mirrors, mirror = await _run_to_its_end(plane, namespace, "edited")

    async def kept() -> bool:
        job = await jobs.get("edited", namespace=namespace)
        return "kept for 12s" in str((job or {}).get("status", {}).get("conditions"))

    await eventually(kept, timeout=30)
    async with namespace_editor(plane.plane, manager, namespace) as editor:
        await Resource(editor, TRAINJOBS).merge_patch(
            "edited", {"metadata": {"annotations": {c.ANNOTATION_CLUSTER: None}}},
            namespace=namespace)

    async def finalizer_dropped() -> bool:
        job = await jobs.get("edited", namespace=namespace)
        return job is not None and c.FINALIZER not in (job["metadata"].get("finalizers") or [])

    await eventually(finalizer_dropped, timeout=15)
    still = await mirrors.get("edited", namespace=namespace)
    assert still is not None and still["metadata"]["uid"] == mirror["metadata"]["uid"]
    await eventually(lambda: _gone(mirrors, "edited", namespace), timeout=40, interval=0.5)
    await asyncio.sleep(2)
    assert await mirrors.get("edited", namespace=namespace) is None  # never placed again


async def _run_to_its_end(plane: Plane, namespace: str, name: str
                          ) -> tuple[Resource, Resource, dict[str, Any]]:
    """A one-node job run on the worker until its pod ends: the manager's and the
    worker's TrainJobs, and its mirror."""
    worker = plane.clients[WORKER]
    jobs, mirrors = Resource(plane.clients["manager"], TRAINJOBS), Resource(worker, TRAINJOBS)
    await jobs.create(trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                               runtime=RUNTIME, num_nodes=1,
                               resources_per_node={"requests": {"cpu": "1"}}),
                      namespace=namespace)
    await eventually(lambda: running_pods(worker, namespace, name, 1), timeout=60)
    mirror = await mirrors.get(name, namespace=namespace)
    assert mirror is not None
    await eventually(lambda: end_pods(worker, namespace, name), timeout=10)
    return jobs, mirrors, mirror
