#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager and kubectl from the Go module
# proxy into a cache outside the repo, keyed by Kubernetes version. Builds only the
# binaries not already there. Prints the directory holding them.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")"
cache_root="${TRAINJOB_DISPATCHER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainjob-dispatcher}"
out="$cache_root/controlplane/$version"
binaries=(etcd kube-apiserver kube-controller-manager kubectl)

all_present() {
  for b in "${binaries[@]}"; do [ -x "$out/$b" ] || return 1; done
}

if all_present; then
  echo "$out"
  exit 0
fi

mkdir -p "$out"
start=$(date +%s)
minor="$(echo "$version" | cut -d. -f2)"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
cd "$here"
for b in "${binaries[@]}"; do
  [ -x "$out/$b" ] && continue
  echo "building $b $version ..." >&2
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp" "./cmd/$b"
  mv "$out/$b.tmp" "$out/$b"
done
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$out"
