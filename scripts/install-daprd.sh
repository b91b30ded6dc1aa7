#!/usr/bin/env bash
# Builds the real Dapr runtime — daprd, placement, scheduler and sentry from dapr v1.18.3 —
# into .tools/daprd/bin/, from the source tarballs in ../shared/vendor/ (or
# $DAPRD_VENDOR_DIR) plus the Go module proxy. docs/adr/0008-daprd.md says why this tag,
# why the component overlay, and what the build costs.
#
# Reproducible: both tarballs are pinned by sha256 and checked before anything is unpacked;
# every other module is pinned by dapr's go.sum; -trimpath, -buildvcs=false and a relative
# replace path keep the build directory and this checkout's git state out of the binaries,
# so a rebuild (cold caches, or GOPROXY=off) is byte-identical.
# Cached: .tools/daprd/bin/INPUTS records the inputs of the installed binaries (tarball
# hashes, this script's hash, Go version and platform); when they match, nothing is built.
# Set DAPRD_FORCE=1 to rebuild anyway.
set -euo pipefail

DAPR_VERSION=1.18.3
DAPR_TAR="dapr-v${DAPR_VERSION}.src.tar.gz"
DAPR_SHA256=eb07bffef81833ce3889e715995b1291674948851d41808e907b332488fb3627
DTG_VERSION=0.12.4  # the durabletask-go dapr v1.18.3's go.mod requires; the proxy refuses it
DTG_TAR="durabletask-go-v${DTG_VERSION}.src.tar.gz"
DTG_SHA256=11b47382a8db4983076ff2888f4fbd358f1eaa3665f5d6acd7641869e23f53ee

# cmd/daprd/components/ registers one component per file. The full `stablecomponents` set
# does not build here (the pulsar component's modules are refused by the proxy), so every
# file not named here is blanked with a Go -overlay (zz_notag.go only builds without the
# tag; it is kept so the tree is otherwise untouched).
KEEP_COMPONENTS=(
    state_sqlite.go        # the actor state store the tests use
    state_postgres.go      # PostgreSQL actor store (state.postgresql v1/v2)
    state_in-memory.go
    pubsub_in-memory.go
    nameresolution_mdns.go # standalone mode's default name resolver
    secretstores_local_env.go
    secretstores_local_file.go
    zz_notag.go
)
BINARIES=(daprd placement scheduler sentry)

SELF="$(realpath "$0")"
cd "$(dirname "$SELF")/.."
ROOT="$PWD"
# Where the tarballs are: $DAPRD_VENDOR_DIR, else ../shared/vendor beside this checkout,
# else beside the checkout this one was cloned from (a clone made elsewhere, e.g. in /tmp,
# of a checkout that sits next to shared/). The pinned hashes below decide, not the place.
vendor_dir() {
    if [ -n "${DAPRD_VENDOR_DIR:-}" ]; then echo "$DAPRD_VENDOR_DIR"; return; fi
    if [ -d "$ROOT/../shared/vendor" ]; then echo "$ROOT/../shared/vendor"; return; fi
    local origin
    origin=$(git -C "$ROOT" config --get remote.origin.url 2>/dev/null || true)
    if [ -n "$origin" ] && [ -d "$origin/../shared/vendor" ]; then
        echo "$origin/../shared/vendor"; return
    fi
    echo "$ROOT/../shared/vendor"
}
VENDOR="$(vendor_dir)"
PREFIX="$ROOT/.tools/daprd"
BIN="$PREFIX/bin"
STAMP="$BIN/INPUTS"

die() { echo "install-daprd: $*" >&2; exit 1; }

check_tarball() {  # file expected-sha256
    [ -f "$VENDOR/$1" ] || die "$VENDOR/$1 not found (set DAPRD_VENDOR_DIR to the directory holding it)"
    local got
    got=$(sha256sum "$VENDOR/$1" | cut -d' ' -f1)
    [ "$got" = "$2" ] || die "$VENDOR/$1: sha256 $got, expected $2"
}
check_tarball "$DAPR_TAR" "$DAPR_SHA256"
check_tarball "$DTG_TAR" "$DTG_SHA256"

INPUTS=$(printf '%s\n' \
    "dapr $DAPR_VERSION $DAPR_SHA256" \
    "durabletask-go $DTG_VERSION $DTG_SHA256" \
    "script $(sha256sum "$SELF" | cut -d' ' -f1)" \
    "go $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)")

have_all=1
for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || have_all=0; done
if [ "$have_all" = 1 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$INPUTS" ] \
        && [ -z "${DAPRD_FORCE:-}" ]; then
    echo "daprd ${DAPR_VERSION}: .tools/daprd/bin is up to date"
    exit 0
fi

START=$(date +%s)
WORK="$PREFIX/build"
rm -rf "$WORK"
mkdir -p "$WORK" "$BIN"
tar -xzf "$VENDOR/$DAPR_TAR" -C "$WORK"
tar -xzf "$VENDOR/$DTG_TAR" -C "$WORK"
SRC="$WORK/dapr-$DAPR_VERSION"
DTG="$WORK/durabletask-go-$DTG_VERSION"
[ -f "$SRC/go.mod" ] && [ -f "$DTG/go.mod" ] || die "unexpected tarball layout under $WORK"

cd "$SRC"
# Relative, so the path recorded in daprd's build info does not depend on the checkout.
go mod edit -replace "github.com/dapr/durabletask-go=../$(basename "$DTG")"

# The overlay: {"Replace": {"<abs path of a component file>": ""}} blanks that file.
python3 - "$SRC/cmd/daprd/components" "$WORK/overlay.json" "${KEEP_COMPONENTS[@]}" <<'EOF'
import json, pathlib, sys
comp, out, keep = pathlib.Path(sys.argv[1]), sys.argv[2], set(sys.argv[3:])
missing = keep - {p.name for p in comp.glob("*.go")}
if missing:
    sys.exit(f"install-daprd: kept component files not in the tree: {sorted(missing)}")
blank = {str(p): "" for p in sorted(comp.glob("*.go")) if p.name not in keep}
json.dump({"Replace": blank}, open(out, "w"), indent=1)
EOF

LDFLAGS="-s -w -X github.com/dapr/dapr/pkg/buildinfo.version=$DAPR_VERSION"
LDFLAGS+=" -X github.com/dapr/dapr/pkg/buildinfo.gitversion=v$DAPR_VERSION"
# -buildvcs=false: the build directory sits inside this checkout, and Go would otherwise
# stamp histaudit's git revision and dirty state into dapr's binaries.
export GOFLAGS="${GOFLAGS:-} -mod=mod -trimpath -buildvcs=false"
OUT="$WORK/out"
mkdir -p "$OUT"
go build -ldflags "$LDFLAGS" -o "$OUT/" ./cmd/placement ./cmd/scheduler ./cmd/sentry
go build -ldflags "$LDFLAGS" -tags stablecomponents -overlay "$WORK/overlay.json" \
    -o "$OUT/daprd" ./cmd/daprd

rm -f "$STAMP"
for b in "${BINARIES[@]}"; do mv -f "$OUT/$b" "$BIN/$b"; done
printf '%s\n' "$INPUTS" >"$STAMP"
cd "$ROOT"
rm -rf "$WORK"
echo "daprd ${DAPR_VERSION} (+ placement, scheduler, sentry) -> .tools/daprd/bin in $(( $(date +%s) - START ))s"
