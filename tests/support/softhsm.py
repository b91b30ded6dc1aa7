"""A real PKCS#11 token for tests: SoftHSM2 (Debian's softhsm2, ``make softhsm``).

:func:`make_token` gives each test a token of its own (its own SoftHSM2
configuration and token directory) holding an Ed25519 key pair generated inside it, so no
private key ever exists as a file. A PKCS#11 library reads its configuration once per
process: whatever uses the token runs in a child process with :attr:`Token.env`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MODULE", "PIN", "Token", "make_token"]

MODULE = os.environ.get("SOFTHSM2_MODULE", "/usr/lib/softhsm/libsofthsm2.so")
PIN = "s3cr3t-4711"

KEYGEN = """
import sys, pkcs11
from pkcs11 import Attribute, KeyType
from pkcs11.util.ec import encode_named_curve_parameters
token = pkcs11.lib(sys.argv[1]).get_token(token_label="histaudit")
with token.open(user_pin=sys.argv[2], rw=True) as session:
    params = session.create_domain_parameters(
        KeyType.EC_EDWARDS, {Attribute.EC_PARAMS: encode_named_curve_parameters("1.3.101.112")},
        local=True)
    params.generate_keypair(store=True, label="ledger")
"""


@dataclass
class Token:
    tmp: Path
    env: dict[str, str]
    pin_file: Path

    def uri(self, token: str = "histaudit", key: str = "ledger", *, module: str = MODULE,
            pin: str | None = None) -> str:
        return (f"pkcs11:token={token};object={key}?module-path={module}"
                f"&pin-source=file:{pin or self.pin_file}")


def make_token(tmp_path: Path) -> Token:
    """A fresh token in ``tmp_path`` labelled ``histaudit``, its key pair ``ledger``."""
    conf, tokens = tmp_path / "softhsm2.conf", tmp_path / "tokens"
    tokens.mkdir()
    conf.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\n"
                    f"log.level = ERROR\n")
    env = {**os.environ, "SOFTHSM2_CONF": str(conf)}
    subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", "histaudit",
                    "--pin", PIN, "--so-pin", "so-" + PIN], env=env, check=True,
                   capture_output=True, timeout=30)
    subprocess.run([sys.executable, "-c", KEYGEN, MODULE, PIN], env=env, check=True,
                   capture_output=True, timeout=30)
    pin_file = tmp_path / "hsm.pin"
    pin_file.write_text(PIN + "\n")
    pin_file.chmod(0o600)
    return Token(tmp_path, {"SOFTHSM2_CONF": str(conf)}, pin_file)
