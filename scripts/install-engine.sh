#!/usr/bin/env bash
# Builds the Dapr workflow engine core (github.com/dapr/durabletask-go) as a standalone
# sidecar with its SQLite backend, into .tools/bin/durabletask-go: engine/main.go (upstream's
# sidecar main plus --lock-timeout and the poll flags) on the library with
# engine/sqlite-poll.patch applied (without it an idle engine polls SQLite with no pause and
# takes more than a core; the patch says why).
#
# Why this tag: v0.14.0 serves the TaskHubSidecarService protos that dapr 1.19's vendored
# client speaks (proto commit 68be09e); tests/integration prove the pair works together.
#
# The module is fetched with `go mod download` (the exact version and its go.sum hash; the
# proxy here answers a version-list request with 403, so nothing asks for one), copied to
# .tools/build, patched there, and engine/go.mod's replace directive points at that copy.
set -euo pipefail
TAG="${DURABLETASK_GO_TAG:-v0.14.0}"
cd "$(dirname "$0")/.."
OUT="$PWD/.tools/bin"
SRC="$PWD/.tools/build/durabletask-go-${TAG}"
mkdir -p "$OUT" "$(dirname "$SRC")"
DIR=$(go mod download -json "github.com/dapr/durabletask-go@${TAG}" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
rm -rf "$SRC"
cp -r "$DIR" "$SRC"
chmod -R u+w "$SRC"
patch -s -p1 -d "$SRC" < engine/sqlite-poll.patch
(cd engine && go build -o "$OUT/durabletask-go" .)
rm -f "$OUT/durabletask-sidecar"  # the second binary of earlier builds: one engine now
echo "engine/main.go on durabletask-go ${TAG} + engine/sqlite-poll.patch -> .tools/bin/durabletask-go"
