"""``replay --engine``: the user's module is imported with the engine as its Dapr sidecar
when no ``DAPR_*`` address is set (issue 48, item 6), on both SDK layouts (dapr 1.19 reads its
settings lazily, dapr 1.18 once at import; tests/agents/test_agent_replay.py runs the
agent on dapr 1.18). A ``DaprClient()`` built inside stands for code
that connects at import; an in-process gRPC server stands for the engine. Cost: under 1 s
of CPU."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from dapr.clients import DaprClient
from dapr.clients.health import DaprHealth
from dapr.conf import settings

from histaudit.cli.replay import SIDECAR_VARIABLES, _sidecar


@pytest.fixture
def engine() -> Iterator[str]:
    """A gRPC server on a free port: what the health check's channel waits for."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.fixture
def no_sidecar(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SIDECAR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAPR_HEALTH_TIMEOUT", "1")


def test_code_that_connects_at_import_finds_the_engine(
        engine: str, no_sidecar: None, capsys: pytest.CaptureFixture[str]) -> None:
    check = DaprHealth.__dict__["wait_for_sidecar"]
    # dapr 1.19 holds a setting once read; dapr 1.18 holds every one from its import (None)
    unset = object()
    before = vars(settings).get("DAPR_GRPC_ENDPOINT", unset)
    with _sidecar(engine, 5.0):
        assert os.environ["DAPR_GRPC_ENDPOINT"] == settings.DAPR_GRPC_ENDPOINT == engine
        began = time.monotonic()
        with DaprClient() as client:  # waits for its sidecar, then opens its channel
            assert client._uri.endpoint == f"dns:{engine}"
        assert time.monotonic() - began < 1
    assert "Health check" not in capsys.readouterr().out  # the SDK's noise when it waits
    assert "DAPR_GRPC_ENDPOINT" not in os.environ
    assert vars(settings).get("DAPR_GRPC_ENDPOINT", unset) is before  # as it was
    assert DaprHealth.__dict__["wait_for_sidecar"] is check
    # without --engine nothing changes
    with _sidecar(None, 5.0):
        assert DaprHealth.__dict__["wait_for_sidecar"] is check


def test_nothing_answering_is_the_sdk_s_timeout_in_one_sentence(no_sidecar: None) -> None:
    with socket.socket() as s:  # a port just bound and released: nothing answers there
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    with _sidecar(address, 0.2), pytest.raises(
            TimeoutError, match=rf"Dapr health check timed out, after 0.2s: nothing answered "
                                rf"at {address} \(--engine\)"):
        DaprClient()


def test_a_variable_the_user_set_is_theirs(engine: str, no_sidecar: None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAPR_HTTP_PORT", "9")
    check = DaprHealth.__dict__["wait_for_sidecar"]
    with _sidecar(engine, 5.0):
        assert DaprHealth.__dict__["wait_for_sidecar"] is check
        assert settings.DAPR_GRPC_ENDPOINT is None
