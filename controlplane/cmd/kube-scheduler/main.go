// Command kube-scheduler is the upstream scheduler; the local workers that run the real
// Trainer chain use it to place the pods of their TrainJobs on kwok nodes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
