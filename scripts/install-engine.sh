#!/usr/bin/env bash
# Builds the Dapr workflow engine core (github.com/dapr/durabletask-go) as a standalone
# sidecar with its SQLite backend, into .tools/bin/durabletask-go.
#
# Why this tag: v0.14.0 serves the TaskHubSidecarService protos that dapr 1.19's vendored
# client speaks (proto commit 68be09e); tests/integration prove the pair works together.
#
# Why not plain `go install …@v0.14.0`: `go install pkg@version` first asks the module
# proxy for the module's version list to look up deprecation notices, and the proxy on
# these machines answers that list with 403. Downloading the exact version and building
# it as the main module is the same source and the same go.sum, without that lookup.
set -euo pipefail
TAG="${DURABLETASK_GO_TAG:-v0.14.0}"
cd "$(dirname "$0")/.."
OUT="$PWD/.tools/bin"
mkdir -p "$OUT"
if go install "github.com/dapr/durabletask-go@${TAG}" 2>/dev/null; then
    cp "$(go env GOPATH)/bin/durabletask-go" "$OUT/durabletask-go"
else
    DIR=$(go mod download -json "github.com/dapr/durabletask-go@${TAG}" \
          | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    (cd "$DIR" && GOFLAGS=-mod=mod go build -o "$OUT/durabletask-go" .)
fi
echo "durabletask-go ${TAG} -> .tools/bin/durabletask-go"

# The same engine library behind a main with --lock-timeout (engine/main.go): crash tests
# that kill the engine use it so a re-dispatch takes seconds, not upstream's two minutes.
# engine/go.mod pins the same tag.
(cd engine && go build -o "$OUT/durabletask-sidecar" .)
echo "engine/main.go (durabletask-go ${TAG}) -> .tools/bin/durabletask-sidecar"
