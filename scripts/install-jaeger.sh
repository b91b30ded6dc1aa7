#!/usr/bin/env bash
# Builds Jaeger (v2, the all-in-one `jaeger` binary: OTLP receiver, in-memory storage,
# query service with its API v3) into .tools/bin/jaeger, from the Go module proxy. The
# span-to-proof tests (tests/integration/test_traces.py) send an audited app's spans to
# it and read them back through its query API, as an operator's tooling would.
#
# Why this version: jaeger v1.75.0 is the release the project approved (the module's v1
# tags carry the v2 binary at cmd/jaeger). `go install …@v1.75.0` refuses it (its go.mod
# has replace directives), so it is built inside the module as the main module, with the
# module's own go.sum (-mod=readonly). Its UI assets are not in the module (they are built
# from jaeger-ui with npm); the tests need only the API, and docs/traces.md says how the
# screenshot there was taken.
#
# Pinned twice: the version, and the module's h1: hash (checked by `go mod download`
# against the checksum database, and compared with the value here). Idempotent: an
# existing build of the same version is kept. ~3 min on two cores with cold caches.
set -euo pipefail
VERSION="v1.75.0"
SUM="h1:OWj6uKRJ8QaH+AVypRwqINGi3Q/WOchbEfp53FJK0Xk="
cd "$(dirname "$0")/.."
OUT="$PWD/.tools/bin"
STAMP="$OUT/.jaeger-$VERSION"
if [[ -x "$OUT/jaeger" && -f "$STAMP" ]]; then
    echo "jaeger $VERSION already in .tools/bin"
    exit 0
fi
mkdir -p "$OUT"
INFO=$(go mod download -json "github.com/jaegertracing/jaeger@${VERSION}")
read -r DIR GOT < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["Dir"], d["Sum"])' <<<"$INFO")
if [[ "$GOT" != "$SUM" ]]; then
    echo "install-jaeger: github.com/jaegertracing/jaeger@$VERSION has hash $GOT, expected $SUM" >&2
    exit 1
fi
(cd "$DIR" && GOFLAGS="-mod=readonly -buildvcs=false" go build -o "$OUT/jaeger" ./cmd/jaeger)
touch "$STAMP"
echo "github.com/jaegertracing/jaeger $VERSION -> .tools/bin/jaeger"
