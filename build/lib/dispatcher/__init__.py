"""trainjob-dispatcher: mirrors Kubeflow TrainJobs to worker clusters chosen by quota."""
