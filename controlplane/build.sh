#!/usr/bin/env bash
# Builds the local control plane from the Go module proxy into a cache outside the repo:
#   - etcd, kube-apiserver, kube-controller-manager, kubectl (module ./go.mod), keyed by the
#     Kubernetes version, in $cache/controlplane/<version>/;
#   - the Kueue manager (module ./kueue/go.mod, its own k8s.io versions), keyed by the
#     Kueue version, in $cache/kueue/<version>/, together with the YAML its module ships:
#     Kueue's CRDs (crd/), its webhook configurations (webhook.yaml) and the JobSet CRD
#     that its TrainJob integration waits for (crd-jobset/).
# Each binary is built only when missing.
#
#   build.sh            builds both; prints the control-plane directory (last line)
#   build.sh kueue      builds only Kueue; prints the Kueue directory (last line)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
what="${1:-all}"
cache_root="${TRAINJOB_DISPATCHER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainjob-dispatcher}"

version="$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")"
out="$cache_root/controlplane/$version"
binaries=(etcd kube-apiserver kube-controller-manager kubectl)

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
    echo "building $b $version ..." >&2
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
  echo "building kueue $kueue_version ..." >&2
  (cd "$here/kueue" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X $kueue_module/pkg/version.GitVersion=$kueue_version" \
    -o "$kueue_out/kueue.tmp" "$kueue_module/cmd/kueue")
  mv "$kueue_out/kueue.tmp" "$kueue_out/kueue"
  echo "kueue built in $(( $(date +%s) - start )) s" >&2
}

case "$what" in
  all) build_controlplane; build_kueue; echo "$out" ;;
  kueue) build_kueue; echo "$kueue_out" ;;
  *) echo "usage: $0 [kueue]" >&2; exit 2 ;;
esac
