"""The Kubeflow Trainer resources the dispatcher reads and writes, and their constants."""

from __future__ import annotations

from dispatcher.kube.resource import ResourceKind

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

TRAINJOBS = ResourceKind(GROUP, VERSION, "trainjobs", namespaced=True)
TRAINING_RUNTIMES = ResourceKind(GROUP, VERSION, "trainingruntimes", namespaced=True)
CLUSTER_TRAINING_RUNTIMES = ResourceKind(GROUP, VERSION, "clustertrainingruntimes",
                                         namespaced=False)

MANAGED_BY_TRAINER = "trainer.kubeflow.org/trainjob-controller"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"

CONDITION_COMPLETE = "Complete"
CONDITION_FAILED = "Failed"
CONDITION_SUSPENDED = "Suspended"

ANCESTOR_STEP_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
NODE_CONTAINER = "node"

# What a manager running Kubeflow Trainer has, and the Kubeflow SDK reads at start.
SYSTEM_NAMESPACE = "kubeflow-system"
PUBLIC_CONFIGMAP = "kubeflow-trainer-public"
PUBLIC_VERSION_KEY = "kubeflow_trainer_version"
TRAINER_RELEASE = "v2.3.0"
