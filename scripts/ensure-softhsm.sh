#!/usr/bin/env bash
# The PKCS#11 signer's tests sign inside a real token: SoftHSM2 (Debian's softhsm2, which
# supports Ed25519 keys, CKM_EDDSA). Install it when its library is not on the machine; a
# SOFTHSM2_MODULE variable naming another copy of libsofthsm2.so is used as it is.
set -euo pipefail
if [ -n "${SOFTHSM2_MODULE:-}" ] && [ -f "${SOFTHSM2_MODULE}" ]; then
    exit 0
fi
if [ -f /usr/lib/softhsm/libsofthsm2.so ] && command -v softhsm2-util >/dev/null 2>&1; then
    exit 0
fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq softhsm2 >/dev/null
test -f /usr/lib/softhsm/libsofthsm2.so
