"""histaudit.services: one HTTP exchange within an overall deadline, redirects kept to
the origin asked, and a service's words quoted without secrets (issue #50 items 5, 7).
Against local servers on 127.0.0.1 (tests/support/slow_server.py).
Cost: ≈ 0.3 s of CPU, 3 s of wall (two 1-second deadlines)."""

from __future__ import annotations

import time

import pytest

from histaudit.services import ExchangeError, fetch, service_words
from histaudit.urls import secrets_of
from support.slow_server import SlowServer

TOKEN = "hvs.CAESIJx7Qz0dNotARealTokenButShapedLikeOne"


@pytest.mark.parametrize(("said", "shown"), [
    (f"permission denied for token {TOKEN}", "permission denied for token ***"),
    (f"token {TOKEN[:12]}… is expired", "token *** is expired"),      # a part of it
    (f"bad\ntoken:\r\n{TOKEN[20:]}", "bad token: ***"),                 # its tail, lines
    ("denied: hvs.SomeOtherTokenItHeld99 and s.abcdefghijklmnop", "denied: *** and ***"),
    ("Authorization: Bearer abcdefghijkl, rest", "Authorization: Bearer *** rest"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln was refused", "jwt *** was refused"),
    ("key is disabled\nfor signing", "key is disabled for signing"),
])
def test_a_services_words_are_quoted_without_secrets(said: str, shown: str) -> None:
    assert service_words(said, [TOKEN]) == shown


def test_a_url_s_secrets_are_its_user_password_and_secret_parameters() -> None:
    url = "https://w:S3cretTok3n@h.example/?token=abcdefgh&x=1"
    assert sorted(secrets_of(url)) == ["S3cretTok3n", "abcdefgh", "w"]
    said = "user w password S3cretTok3n (S3cretTok…), query token abcdefgh, wow"
    assert service_words(said, secrets_of(url)) == \
        "user *** password *** *** query token *** wow"
    assert service_words("x" * 500, limit=50) == "x" * 50 + "…"


@pytest.mark.parametrize("mode", ["trickle-head", "trickle-body"])
def test_a_trickled_answer_ends_at_the_deadline(mode: str) -> None:
    with SlowServer(mode, interval=0.2) as server:
        start = time.monotonic()
        with pytest.raises(ExchangeError, match="no complete answer within 1s") as info:
            fetch(server.url + "/x", timeout=1, limit=1 << 20)
        assert info.value.timed_out and time.monotonic() - start < 3


def test_redirects_stay_within_the_origin_asked() -> None:
    with SlowServer("answer", body=b"{}") as target:
        away = target.url.replace("127.0.0.1", "127.0.0.2") + "/elsewhere"
        with SlowServer("redirect", location=away) as server, \
                pytest.raises(ExchangeError, match=r"redirected to another host \(http://"
                                                   r"127\.0\.0\.2"):
            fetch(server.url + "/x", timeout=5, limit=100)
        with SlowServer("redirect") as server:
            server.location = f"{target.url}/same".replace(str(target.port),
                                                           str(server.port))
            with pytest.raises(ExchangeError, match="more than 5 redirects"):
                fetch(server.url + "/x", timeout=5, limit=100)
            assert server.paths == ["/x"] + ["/same"] * 5
            assert fetch(server.url + "/x", timeout=5, limit=100, redirects=0).status == 302
        assert fetch(target.url + "/y", timeout=5, limit=100).body == b"{}"
    assert target.paths == ["/y"]
