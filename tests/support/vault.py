"""A real key service for tests: HashiCorp Vault's dev server (``scripts/install-vault.sh``)
with its transit secrets engine, on a free loopback port, its storage in memory.

:class:`Vault` starts one with a random root token, mounts ``transit`` and makes keys the
way an operator would, through Vault's HTTP API; ``key_url`` is the histaudit ``--key`` of
a transit key, its token in an owner-only file.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from histaudit.testing.engine import end_process, free_port
from support.repo import tool_binary

__all__ = ["Vault", "vault_bin"]

_READY_TIMEOUT = 60.0


def vault_bin() -> Path:
    return tool_binary("vault", "HISTAUDIT_VAULT_BIN", "scripts/install-vault.sh")


class Vault:
    """One Vault dev server with the transit engine mounted at ``transit``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.token_file = workdir / "vault-token"
        self.log = workdir / "vault.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> Vault:
        self.token_file.write_text(self.token + "\n")
        self.token_file.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("VAULT_")}
        env["HOME"] = str(self.workdir)  # the dev server's token helper writes ~/.vault-token
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen(
                [str(vault_bin()), "server", "-dev", f"-dev-root-token-id={self.token}",
                 f"-dev-listen-address={self.address}", "-dev-no-store-token"],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + _READY_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"vault exited: {self.log.read_text()[-2000:]}")
            try:
                if self.api("GET", "sys/health").get("initialized"):
                    break
            except (OSError, urllib.error.URLError, ValueError):
                pass
            time.sleep(0.2)
        else:
            self.__exit__()
            raise RuntimeError(f"vault not ready in {_READY_TIMEOUT} s")
        self.api("POST", "sys/mounts/transit", {"type": "transit"})
        return self

    def __exit__(self, *_: object) -> None:
        end_process(self._proc)

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"http://{self.address}/v1/{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"X-Vault-Token": self.token, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            data = response.read()
        return json.loads(data) if data else {}

    def make_key(self, name: str, kind: str = "ed25519") -> None:
        self.api("POST", f"transit/keys/{name}", {"type": kind})

    def rotate(self, name: str) -> None:
        self.api("POST", f"transit/keys/{name}/rotate")

    def key_url(self, name: str, *extra: str) -> str:
        query = "&".join([f"token-source=file:{self.token_file}", *extra])
        return f"transit+http://{self.address}/transit/{name}?{query}"
