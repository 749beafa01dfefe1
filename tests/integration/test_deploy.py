"""deploy/: the manifests are accepted by a real API server, the opt-in policy mutates,
and the dispatcher works with exactly the RBAC they grant."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.pki import sign_client_certificate
from dispatcher.admin import register_worker
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.api.workercluster import WORKER_CLUSTERS
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.resource import Resource, ResourceKind
from tests.integration.conftest import (
    DEFAULT_QUOTA,
    FAST_LEADER_ELECTION,
    StartDispatcher,
    eventually,
)

pytestmark = pytest.mark.integration
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NAMESPACE = "trainjob-dispatcher"
KINDS = {
    "Namespace": ResourceKind("", "v1", "namespaces", namespaced=False),
    "ServiceAccount": ResourceKind("", "v1", "serviceaccounts", namespaced=True),
    "Service": ResourceKind("", "v1", "services", namespaced=True),
    "ConfigMap": ResourceKind("", "v1", "configmaps", namespaced=True),
    "Deployment": ResourceKind("apps", "v1", "deployments", namespaced=True),
    "ClusterRole": ResourceKind("rbac.authorization.k8s.io", "v1", "clusterroles", False),
    "ClusterRoleBinding": ResourceKind("rbac.authorization.k8s.io", "v1",
                                       "clusterrolebindings", False),
    "Role": ResourceKind("rbac.authorization.k8s.io", "v1", "roles", True),
    "RoleBinding": ResourceKind("rbac.authorization.k8s.io", "v1", "rolebindings", True),
    "CustomResourceDefinition": ResourceKind("apiextensions.k8s.io", "v1",
                                             "customresourcedefinitions", False),
    "MutatingAdmissionPolicy": ResourceKind("admissionregistration.k8s.io", "v1",
                                            "mutatingadmissionpolicies", False),
    "MutatingAdmissionPolicyBinding": ResourceKind("admissionregistration.k8s.io", "v1",
                                                   "mutatingadmissionpolicybindings", False),
}
PROMETHEUS_OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


def kustomize() -> list[dict[str, Any]]:
    """The base's objects: its resources and generated ConfigMaps, namespace applied."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for path in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((DEPLOY / path).read_text()) if d]
    for generator in kustomization["configMapGenerator"]:
        docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": generator["name"], "namespace": NAMESPACE},
                     "data": {f: (DEPLOY / f).read_text() for f in generator["files"]}})
    for doc in docs:
        kind = KINDS.get(doc["kind"])
        if kind is not None and kind.namespaced:
            doc["metadata"]["namespace"] = kustomization["namespace"]
    return docs


async def apply_all(client: ClusterClient, docs: list[dict[str, Any]]) -> list[str]:
    applied = []
    for doc in docs:
        if doc["kind"] in PROMETHEUS_OPERATOR_KINDS:
            continue
        await Resource(client, KINDS[doc["kind"]]).apply(doc, field_manager="deploy-test")
        applied.append(doc["kind"])
    return applied


async def test_manifests_are_accepted_and_the_opt_in_policy_sets_managed_by(
    admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    docs = kustomize()
    assert {d["kind"] for d in docs} >= set(KINDS) - {"Namespace"} | PROMETHEUS_OPERATOR_KINDS
    applied = await apply_all(admin_clients["manager"], docs)
    assert "Deployment" in applied and "MutatingAdmissionPolicy" in applied
    deployment = await Resource(admin_clients["manager"], KINDS["Deployment"]).get(
        "trainjob-dispatcher", namespace=NAMESPACE)
    assert deployment is not None and deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True

    jobs = Resource(admin_clients["manager"], TRAINJOBS)

    async def mutated() -> dict[str, Any] | None:
        name = f"sdk-{int(asyncio.get_running_loop().time() * 1000) % 10**8}"
        try:
            job = await jobs.create(trainjob(name, namespace,
                                             labels={"dispatcher.trainjob.io/dispatch": "true"}),
                                    namespace=namespace)
        except ApiException as error:  # the policy is still being loaded
            assert error.status == 503, error
            return None
        return job if job["spec"]["managedBy"] == MANAGED_BY_MULTIKUEUE else None
    await eventually(mutated, timeout=15, interval=0.5)
    plain = await jobs.create(trainjob("not-opted-in", namespace), namespace=namespace)
    assert plain["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"


def test_alert_rules_are_valid_promql(tmp_path: Path) -> None:
    rule = yaml.safe_load((DEPLOY / "prometheusrule.yaml").read_text())
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: `make system-deps` installs Debian's prometheus"
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "rules.yaml")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 rules found" in result.stdout


async def test_the_dispatcher_works_with_exactly_the_deployed_rbac(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    manager = admin_clients["manager"]
    docs = kustomize()
    rbac = [d for d in docs if d["kind"] in ("Namespace", "ClusterRole", "Role")]
    await apply_all(manager, rbac)
    user, group = f"{namespace}-dispatcher", f"{namespace}-group"
    subject = [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}]
    roleref = {"apiGroup": "rbac.authorization.k8s.io", "name": "trainjob-dispatcher"}
    await Resource(manager, KINDS["ClusterRoleBinding"]).apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": user}, "roleRef": dict(roleref, kind="ClusterRole"),
        "subjects": subject}, field_manager="deploy-test")
    await Resource(manager, KINDS["RoleBinding"]).apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": user, "namespace": NAMESPACE},
        "roleRef": dict(roleref, kind="Role"), "subjects": subject},
        field_manager="deploy-test")
    cluster = control_plane.clusters["manager"]
    cert, key = sign_client_certificate(cluster.certs, user=user, groups=[group])
    restricted = cluster.kubeconfig(user=user, cert=cert, key=key)

    worker_name = f"{namespace}-rbac"
    await register_worker(manager, namespace=NAMESPACE, name=worker_name,
                          kubeconfig=control_plane.clusters["worker-a"].kubeconfig(),
                          quota=DEFAULT_QUOTA)
    probe = await ClusterClient.from_kubeconfig(name="restricted", kubeconfig=restricted,
                                                settings=ClientSettings(timeout_seconds=5))
    try:
        elsewhere = Resource(probe, KINDS["ServiceAccount"])
        with pytest.raises(Exception) as refused:
            await elsewhere.list(namespace="kube-system")
        assert getattr(refused.value, "status", None) == 403
    finally:
        await probe.close()
    try:
        await start_dispatcher(
            wait_for_workers=False, manager_kubeconfig=restricted, namespace=NAMESPACE,
            workers={"fromCRD": True, "static": []},
            leaderElection={**FAST_LEADER_ELECTION, "leaseName": f"lease-{namespace}"})
        jobs = Resource(manager, TRAINJOBS)
        await jobs.create(trainjob("least-privilege", namespace,
                                   managed_by=MANAGED_BY_MULTIKUEUE), namespace=namespace)
        mirror = Resource(admin_clients["worker-a"], TRAINJOBS)
        await eventually(lambda: mirror.get("least-privilege", namespace=namespace),
                         timeout=30)
        status = {"jobsStatus": [{"name": "node", "active": 1, "ready": 1, "succeeded": 0,
                                  "failed": 0, "suspended": 0}]}

        async def synced() -> bool:  # the worker's Trainer wrote it; the pod runs on kwok
            job = await jobs.get("least-privilege", namespace=namespace)
            return ((job or {}).get("status") or {}).get("jobsStatus") == status["jobsStatus"]
        await eventually(synced, timeout=30)
        async def counted() -> bool:
            worker = await Resource(manager, WORKER_CLUSTERS).get(worker_name)
            return bool(worker and worker.get("status", {}).get("mirrors", 0) >= 1)
        await eventually(counted, timeout=10)
        listed = await Resource(manager, ResourceKind("events.k8s.io", "v1", "events", True)
                                ).list(namespace=namespace)
        assert any(e["reason"] == c.REASON_PLACED for e in listed["items"])
    finally:
        await Resource(manager, WORKER_CLUSTERS).delete(worker_name)
