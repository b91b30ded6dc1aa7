"""A real trace backend for tests: Jaeger v2 all-in-one (``scripts/install-jaeger.sh``),
in-memory storage, its OTLP/HTTP receiver and query service on free loopback ports.

:class:`Jaeger` is started and stopped by the tests; ``otlp_traces`` is what an app's
OTLP exporter posts to (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), ``url`` the query service
(``histaudit prove --jaeger``), :meth:`find_spans` its API v3 search, as a SIEM would ask.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from histaudit.testing.engine import end_process, free_port
from support.repo import tool_binary

__all__ = ["Jaeger", "jaeger_bin"]

_READY_TIMEOUT = 30.0


def jaeger_bin() -> Path:
    return tool_binary("jaeger", "HISTAUDIT_JAEGER_BIN", "scripts/install-jaeger.sh")


_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


class Jaeger:
    """One Jaeger process with its own ports and log."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ports = {n: free_port() for n in ("query", "query_grpc", "health", "otlp")}
        self.config = workdir / "jaeger.yaml"
        self.log = workdir / "jaeger.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['query']}"

    @property
    def otlp_traces(self) -> str:
        return f"http://127.0.0.1:{self.ports['otlp']}/v1/traces"

    def __enter__(self) -> Jaeger:
        # a free port can be taken by another process (a parallel worker's daprd) between
        # free_port() and Jaeger's bind: then start again on new ports
        for _ in range(3):
            if self._start():
                return self
            self.ports = {n: free_port() for n in self.ports}
        raise RuntimeError(f"jaeger found no free ports: {self.log.read_text()[-2000:]}")

    def _start(self) -> bool:
        self.config.write_text(_CONFIG.format(**self.ports))
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen([str(jaeger_bin()), "--config", str(self.config)],
                                          stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        deadline = time.monotonic() + _READY_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                text = self.log.read_text()
                if "address already in use" in text:
                    return False
                raise RuntimeError(f"jaeger exited: {text[-2000:]}")
            try:
                self.get("/api/v3/services")
                return True
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(f"jaeger not ready in {_READY_TIMEOUT} s: "
                           f"{self.log.read_text()[-2000:]}")

    def __exit__(self, *_: object) -> None:
        end_process(self._proc)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.loads(response.read())

    def find_spans(self, service: str) -> list[dict[str, Any]]:
        """Every span of ``service`` stored in the last hour (API v3 FindTraces), each
        with its attributes as a plain dict under ``"attrs"``."""
        now = time.time()
        q = (f"/api/v3/traces?query.service_name={service}"
             f"&query.start_time_min={_rfc3339(now - 3600)}"
             f"&query.start_time_max={_rfc3339(now + 60)}&query.num_traces=1000")
        try:
            doc = self.get(q)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # "No traces found"
                return []
            raise
        spans = []
        for resource in doc["result"]["resourceSpans"]:
            for scope in resource.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    span["attrs"] = {a["key"]: next(iter(a["value"].values()), None)
                                     for a in span.get("attributes", [])}
                    spans.append(span)
        return spans


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
