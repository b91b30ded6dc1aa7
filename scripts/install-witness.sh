#!/usr/bin/env bash
# Builds the C2SP tlog-witness the tests cosign with: litewitness, and witnessctl (which
# registers logs in its database), from filippo.io/torchwood, into .tools/bin/.
#
# Why this version: v0.9.0 is the newest that builds with Go 1.26 (v0.10.0 needs Go 1.27);
# it speaks c2sp.org/tlog-witness (add-checkpoint) and signs c2sp.org/tlog-cosignature
# cosignature/v1 (docs/adr/0007-witnesses.md).
#
# Pinned twice: the version, and the module's h1: hash, which `go mod download` checks
# against go.sum's checksum database (sum.golang.org) and which this script compares with
# the value recorded here, so a re-tagged or substituted module is refused. The build uses
# torchwood's own go.sum for every dependency. Idempotent: an existing build of the same
# version is kept.
set -euo pipefail
VERSION="v0.9.0"
SUM="h1:2W156cI7K3MyxEyNTuS1C9lYEW7y1u7PoHLmvgNsiZc="
cd "$(dirname "$0")/.."
OUT="$PWD/.tools/bin"
STAMP="$OUT/.litewitness-$VERSION"
if [[ -x "$OUT/litewitness" && -x "$OUT/witnessctl" && -f "$STAMP" ]]; then
    echo "litewitness $VERSION already in .tools/bin"
    exit 0
fi
mkdir -p "$OUT"
INFO=$(go mod download -json "filippo.io/torchwood@${VERSION}")
read -r DIR GOT < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["Dir"], d["Sum"])' <<<"$INFO")
if [[ "$GOT" != "$SUM" ]]; then
    echo "install-witness: filippo.io/torchwood@$VERSION has hash $GOT, expected $SUM" >&2
    exit 1
fi
# The module cache is read-only; -mod=readonly makes the build fail rather than change
# go.mod or go.sum if they did not already name every dependency.
(cd "$DIR" && GOFLAGS="-mod=readonly -buildvcs=false" \
    go build -o "$OUT/" ./cmd/litewitness ./cmd/witnessctl)
touch "$STAMP"
echo "filippo.io/torchwood $VERSION -> .tools/bin/litewitness, .tools/bin/witnessctl"
