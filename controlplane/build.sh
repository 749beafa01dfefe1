#!/usr/bin/env bash
# Builds the local control plane from the Go module proxy into a cache outside the repo:
#   - etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (module
#     ./go.mod), keyed by the Kubernetes version, in $cache/controlplane/<version>/;
#   - the Kueue manager (module ./kueue/go.mod, its own k8s.io versions), keyed by the
#     Kueue version, in $cache/kueue/<version>/, together with the YAML its module ships:
#     Kueue's CRDs (crd/), its webhook configurations (webhook.yaml) and the JobSet CRD
#     that its TrainJob integration waits for (crd-jobset/).
#   - the real Trainer chain for the workers (modules ./trainer, ./jobset, ./kwok, each
#     pinning one upstream module): the Trainer controller manager with the CRDs, webhook
#     configurations and runtimes its module ships, in $cache/trainer/<version>/; the
#     JobSet controller with its CRD and webhooks, in $cache/jobset/<version>/; kwok with
#     its pod and node stages and its Logs CRD, in $cache/kwok/<version>/.
# Each binary is built only when missing.
#
#   build.sh            builds the control plane (about 10 minutes the first time on 2
#                       cores, 603 s measured); prints the control-plane directory (last
#                       line)
#   build.sh kueue      builds Kueue (about 3.5 minutes the first time on 2 cores, 208 s
#                       measured); prints the Kueue directory (last line)
#   build.sh trainer    builds the Trainer, JobSet and kwok (about 14 minutes the first
#                       time on 2 cores, 866 s measured); prints the three directories
#                       (last line)
#   build.sh kueue-remote-qps
#                       also builds $kueue_out/kueue-remote-qps: the same Kueue with one
#                       change, made here to a copy of its module: MultiKueue's clients for
#                       the worker clusters take their QPS and burst from the environment
#                       (KUEUE_MULTIKUEUE_REMOTE_QPS, KUEUE_MULTIKUEUE_REMOTE_BURST) instead
#                       of client-go's fixed 5 QPS / 10 burst (not configurable in v0.17,
#                       Kueue issue #14973). Unset, it behaves as the stock binary. Prints
#                       the Kueue directory (last line).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
what="${1:-controlplane}"
cache_root="${TRAINJOB_DISPATCHER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainjob-dispatcher}"

version="$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")"
out="$cache_root/controlplane/$version"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

kueue_module=sigs.k8s.io/kueue
kueue_version="$(awk -v m="$kueue_module" '$1 == m {print $2}' "$here/kueue/go.mod")"
kueue_out="$cache_root/kueue/$kueue_version"

controlplane_present() {
  for b in "${binaries[@]}"; do [ -x "$out/$b" ] || return 1; done
}

build_controlplane() {
  controlplane_present && return 0
  mkdir -p "$out"
  local start minor ldflags
  start=$(date +%s)
  minor="$(echo "$version" | cut -d. -f2)"
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  for b in "${binaries[@]}"; do
    [ -x "$out/$b" ] && continue
    echo "building $b $version (the control plane: about 10 minutes in all the first time on 2 cores) ..." >&2
    (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp" "./cmd/$b")
    mv "$out/$b.tmp" "$out/$b"
  done
  echo "control plane built in $(( $(date +%s) - start )) s" >&2
}

module_dir() {
  (cd "$here/kueue" && go mod download "$1" && go list -m -f '{{.Dir}}' "$1")
}

copy_kueue_yaml() {
  [ -f "$kueue_out/webhook.yaml" ] && [ -d "$kueue_out/crd-jobset" ] && return 0
  local kueue_dir jobset_dir
  kueue_dir="$(module_dir "$kueue_module")"
  jobset_dir="$(module_dir sigs.k8s.io/jobset)"
  rm -rf "$kueue_out/crd" "$kueue_out/crd-jobset"
  mkdir -p "$kueue_out/crd" "$kueue_out/crd-jobset"
  cp "$kueue_dir"/config/components/crd/bases/*.yaml "$kueue_out/crd/"
  cp "$jobset_dir"/config/components/crd/bases/*.yaml "$kueue_out/crd-jobset/"
  cp "$kueue_dir/config/components/webhook/manifests.yaml" "$kueue_out/webhook.yaml.tmp"
  chmod -R u+w "$kueue_out"
  mv "$kueue_out/webhook.yaml.tmp" "$kueue_out/webhook.yaml"
}

build_kueue() {
  mkdir -p "$kueue_out"
  copy_kueue_yaml
  [ -x "$kueue_out/kueue" ] && return 0
  local start
  start=$(date +%s)
  echo "building kueue $kueue_version (first use of Kueue: about 3.5 minutes on 2 cores) ..." >&2
  (cd "$here/kueue" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X $kueue_module/pkg/version.GitVersion=$kueue_version" \
    -o "$kueue_out/kueue.tmp" "$kueue_module/cmd/kueue")
  mv "$kueue_out/kueue.tmp" "$kueue_out/kueue"
  echo "kueue built in $(( $(date +%s) - start )) s" >&2
}

# MultiKueue's remote clients are built in newClientWithWatch (multikueuecluster.go);
# both of its returns get the rest.Config passed through remoteRateLimit, a file added
# to the package. Nothing else of Kueue changes.
remote_qps_go='package multikueue

// Added by trainjob-dispatcher controlplane/build.sh (not part of Kueue): the rate limit
// of the clients for worker clusters, from the environment when set.

import (
	"os"
	"strconv"

	"k8s.io/client-go/rest"
)

func remoteRateLimit(config *rest.Config) *rest.Config {
	config = rest.CopyConfig(config)
	if qps, err := strconv.ParseFloat(os.Getenv("KUEUE_MULTIKUEUE_REMOTE_QPS"), 32); err == nil {
		config.QPS = float32(qps)
	}
	if burst, err := strconv.Atoi(os.Getenv("KUEUE_MULTIKUEUE_REMOTE_BURST")); err == nil {
		config.Burst = burst
	}
	return config
}
'

build_kueue_remote_qps() {
  build_kueue
  [ -x "$kueue_out/kueue-remote-qps" ] && return 0
  local start src work package file
  start=$(date +%s)
  src="$(module_dir "$kueue_module")"
  work="$cache_root/kueue/$kueue_version-remote-qps-src"
  rm -rf "$work"
  mkdir -p "$work"
  cp -R "$src/." "$work/module"
  chmod -R u+w "$work/module"
  package="$work/module/pkg/controller/admissionchecks/multikueue"
  file="$package/multikueuecluster.go"
  sed -i -E 's/return client\.NewWithWatch\((config\.RestConfig|restConfig), options\)/return client.NewWithWatch(remoteRateLimit(\1), options)/' "$file"
  if [ "$(grep -c 'client.NewWithWatch(remoteRateLimit(' "$file")" != 2 ]; then
    echo "kueue-remote-qps: newClientWithWatch in $file is not as expected" >&2
    exit 1
  fi
  printf '%s' "$remote_qps_go" > "$package/zz_remote_rate_limit.go"
  cp "$here/kueue/go.mod" "$work/go.mod"
  cp "$here/kueue/go.sum" "$work/go.sum"
  echo "replace $kueue_module => $work/module" >> "$work/go.mod"
  echo "building kueue-remote-qps $kueue_version ..." >&2
  (cd "$here/kueue" && CGO_ENABLED=0 go build -modfile="$work/go.mod" -trimpath \
    -ldflags "-s -w -X $kueue_module/pkg/version.GitVersion=$kueue_version-remote-qps" \
    -o "$kueue_out/kueue-remote-qps.tmp" "$kueue_module/cmd/kueue")
  mv "$kueue_out/kueue-remote-qps.tmp" "$kueue_out/kueue-remote-qps"
  echo "kueue-remote-qps built in $(( $(date +%s) - start )) s" >&2
}

pinned() {  # the version module $2 is pinned at in controlplane/$1/go.mod
  awk -v m="$2" '$1 == m {print $2}' "$here/$1/go.mod"
}

trainer_module=github.com/kubeflow/trainer/v2
jobset_module=sigs.k8s.io/jobset
kwok_module=sigs.k8s.io/kwok
trainer_out="$cache_root/trainer/$(pinned trainer "$trainer_module")"
jobset_out="$cache_root/jobset/$(pinned jobset "$jobset_module")"
kwok_out="$cache_root/kwok/$(pinned kwok "$kwok_module")"

chain_dir() {  # the source of module $2, downloaded through controlplane/$1
  (cd "$here/$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2")
}

build_tool() {  # build_tool <module dir> <package> <output binary>
  [ -x "$3" ] && return 0
  local start
  start=$(date +%s)
  echo "building $(basename "$3") from $2 (the Trainer chain: about 14 minutes in all the first time on 2 cores) ..." >&2
  mkdir -p "$(dirname "$3")"
  (cd "$here/$1" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$3.tmp" "$2")
  mv "$3.tmp" "$3"
  echo "$(basename "$3") built in $(( $(date +%s) - start )) s" >&2
}

copy_chain_yaml() {
  local dir
  if [ ! -f "$trainer_out/webhook.yaml" ]; then
    dir="$(chain_dir trainer "$trainer_module")"
    mkdir -p "$trainer_out/crd" "$trainer_out/runtimes"
    cp "$dir"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$trainer_out/crd/"
    cp "$dir"/manifests/base/runtimes/*.yaml "$trainer_out/runtimes/"
    rm -f "$trainer_out/runtimes/kustomization.yaml"
    cp "$dir/manifests/base/webhook/manifests.yaml" "$trainer_out/webhook.yaml.tmp"
    chmod -R u+w "$trainer_out"
    mv "$trainer_out/webhook.yaml.tmp" "$trainer_out/webhook.yaml"
  fi
  if [ ! -f "$jobset_out/webhook.yaml" ]; then
    dir="$(chain_dir jobset "$jobset_module")"
    mkdir -p "$jobset_out/crd"
    cp "$dir"/config/components/crd/bases/*.yaml "$jobset_out/crd/"
    cp "$dir/config/components/webhook/manifests.yaml" "$jobset_out/webhook.yaml.tmp"
    chmod -R u+w "$jobset_out"
    mv "$jobset_out/webhook.yaml.tmp" "$jobset_out/webhook.yaml"
  fi
  if [ ! -d "$kwok_out/stages" ]; then
    dir="$(chain_dir kwok "$kwok_module")"
    mkdir -p "$kwok_out/stages.tmp"
    cp "$dir"/kustomize/stage/node/fast/node-initialize.yaml "$kwok_out/stages.tmp/"
    cp "$dir"/kustomize/stage/pod/general/pod-*.yaml "$kwok_out/stages.tmp/"
    cp "$dir"/kustomize/stage/pod/chaos/pod-container-running-failed.yaml \
      "$kwok_out/stages.tmp/"
    chmod -R u+w "$kwok_out"
    mv "$kwok_out/stages.tmp" "$kwok_out/stages"
  fi
  if [ ! -d "$kwok_out/crd" ]; then  # the Logs kind: which file kwok serves a pod's logs from
    dir="$(chain_dir kwok "$kwok_module")"
    mkdir -p "$kwok_out/crd.tmp"
    cp "$dir"/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml "$kwok_out/crd.tmp/"
    chmod -R u+w "$kwok_out/crd.tmp"
    mv "$kwok_out/crd.tmp" "$kwok_out/crd"
  fi
}

build_trainer_chain() {
  copy_chain_yaml
  build_tool trainer "$trainer_module/cmd/trainer-controller-manager" \
    "$trainer_out/trainer-controller-manager"
  build_tool jobset "$jobset_module" "$jobset_out/jobset"
  build_tool kwok "$kwok_module/cmd/kwok" "$kwok_out/kwok"
}

case "$what" in
  controlplane) build_controlplane; echo "$out" ;;
  trainer) build_trainer_chain; echo "$trainer_out $jobset_out $kwok_out" ;;
  kueue) build_kueue; echo "$kueue_out" ;;
  kueue-remote-qps) build_kueue_remote_qps; echo "$kueue_out" ;;
  *) echo "usage: $0 [controlplane|kueue|kueue-remote-qps|trainer]" >&2; exit 2 ;;
esac
