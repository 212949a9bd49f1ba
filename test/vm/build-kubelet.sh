#!/usr/bin/env bash
# Build kubelet from the Go module proxy into $CACHE/kubelet-<version>/bin,
# once; later runs reuse it. Used by test/vm/setup.sh.
#
# kubernetes is not meant to be a dependency: its go.mod points each staging
# module (k8s.io/api, client-go, kubelet, cri-api, ...) at ./staging. A
# throwaway module requires k8s.io/kubernetes and replaces each of those with
# the published v0.<minor>.<patch> of the same release.
set -euo pipefail

VERSION=${1:-v1.37.2}
CACHE=${NRI_SYSCTL_CACHE:-/var/cache/nri-sysctl-e2e}
OUT="$CACHE/kubelet-$VERSION/bin"

log() { printf '[build-kubelet %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -x $OUT/kubelet ]]; then
	log "kubelet $VERSION: reusing $OUT/kubelet"
	exit 0
fi

mkdir -p "$CACHE" "$OUT"
tmp=$(mktemp -d "$CACHE/.build-kubelet-$VERSION.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

staging_version="v0.${VERSION#v1.}"
start=$(date +%s)
log "start: kubelet $VERSION (staging modules at $staging_version)"
cd "$tmp"
gomod=$(go mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[[ -f $gomod ]] || { log "no go.mod for k8s.io/kubernetes@$VERSION"; exit 1; }
{
	printf 'module kubeletbuild\n\ngo 1.25\n\nrequire k8s.io/kubernetes %s\n\n' "$VERSION"
	sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$staging_version"'#p' "$gomod"
} >go.mod
n=$(grep -c '^replace' go.mod)
[[ $n -gt 20 ]] || { log "only $n staging replace lines found in $gomod"; exit 1; }
cat >main.go <<'GO'
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
GO
go mod tidy </dev/null
minor=${VERSION#v1.}
minor=${minor%%.*}
CGO_ENABLED=0 go build -trimpath -o "$tmp/kubelet" -ldflags "-s -w \
	-X k8s.io/component-base/version.gitVersion=$VERSION \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$minor" . </dev/null
mv -f "$tmp/kubelet" "$OUT/kubelet.new"
mv -f "$OUT/kubelet.new" "$OUT/kubelet"
log "done: kubelet $VERSION in $(($(date +%s) - start))s: $("$OUT/kubelet" --version)"
