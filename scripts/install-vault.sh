#!/usr/bin/env bash
# Builds HashiCorp Vault (the server: its dev mode serves the transit secrets engine the
# transit signer's tests sign with, tests/integration/test_transit.py) into .tools/bin/vault,
# from the Go module proxy.
#
# Why this version: v1.21.1 is the release the proxy serves. OpenBao (the same transit API)
# is refused by the proxy. Vault's go.mod replaces its api and sdk modules with
# directories that are separate modules and so not in the module's zip: the build copies
# the module, drops those five replace directives and takes the versions go.mod requires
# from the proxy (checked against the checksum database, -mod=mod). Licence: BUSL-1.1,
# which allows this non-production use; histaudit ships no Vault code.
#
# Built with Vault's own `minimal` build tag (its Makefile's BUILD_MINIMAL): the core and
# the builtin engines (transit, kv, pki, ssh; approle, cert, jwt, userpass), without the
# cloud and database plugins the tests never mount. Full, the cold build took 586 s on
# two cores (half of everything `make test` builds); minimal, 286 s (binary 139 MB
# against 362 MB).
#
# Pinned twice: the version, and the module's h1: hash. Idempotent: an existing build of
# the same version and flavour is kept.
set -euo pipefail
VERSION="v1.21.1"
FLAVOUR="minimal"
SUM="h1:4bYxh55jSitPOs5+iPshEdDhBLeXCm6BjGDIV1vYzys="
cd "$(dirname "$0")/.."
OUT="$PWD/.tools/bin"
STAMP="$OUT/.vault-$VERSION-$FLAVOUR"
if [[ -x "$OUT/vault" && -f "$STAMP" ]]; then
    echo "vault $VERSION already in .tools/bin"
    exit 0
fi
mkdir -p "$OUT"
# The build is kept outside the checkout, like Go's own caches: a fresh clone on the same
# machine links it in at once.
CACHE="${HISTAUDIT_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/histaudit}/vault-$VERSION-$FLAVOUR"
if [[ ! -x "$CACHE/vault" || "$(cat "$CACHE/.sum" 2>/dev/null)" != "$SUM" ]]; then
    INFO=$(go mod download -json "github.com/hashicorp/vault@${VERSION}")
    read -r DIR GOT < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["Dir"], d["Sum"])' <<<"$INFO")
    if [[ "$GOT" != "$SUM" ]]; then
        echo "install-vault: github.com/hashicorp/vault@$VERSION has hash $GOT, expected $SUM" >&2
        exit 1
    fi
    rm -rf "$CACHE"
    mkdir -p "$CACHE"
    cp -r "$DIR" "$CACHE/src"
    chmod -R u+w "$CACHE/src"
    (cd "$CACHE/src" \
        && go mod edit -dropreplace=github.com/hashicorp/vault/api \
            -dropreplace=github.com/hashicorp/vault/api/auth/approle \
            -dropreplace=github.com/hashicorp/vault/api/auth/kubernetes \
            -dropreplace=github.com/hashicorp/vault/api/auth/userpass \
            -dropreplace=github.com/hashicorp/vault/sdk \
        && GOFLAGS="-mod=mod -buildvcs=false" go build -tags "$FLAVOUR" -ldflags="-s -w" -o "$CACHE/vault" .)
    rm -rf "$CACHE/src"
    echo "$SUM" > "$CACHE/.sum"
fi
ln -f "$CACHE/vault" "$OUT/vault" 2>/dev/null || cp "$CACHE/vault" "$OUT/vault"
touch "$STAMP"
echo "github.com/hashicorp/vault $VERSION ($FLAVOUR) -> .tools/bin/vault (built in $CACHE)"
