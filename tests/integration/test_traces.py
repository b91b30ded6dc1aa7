"""Traces that resolve to proofs (issue #42, item 2), end to end on real parts: an audited
app on the real engine sends its spans through OpenTelemetry's SDK and OTLP exporter to a
real Jaeger the test starts; the spans are read back through Jaeger's query API, as an
operator's tooling would, and ``histaudit prove`` turns them into a bundle that
``verify --bundle`` checks offline with only the public key.

* Every audited activity, the LLM call and the tool call is a span, named and attributed
  by the GenAI semantic conventions, that names its signed entry (origin, instance, seq,
  leaf, leaf hash): the attributes agree with the ledger.
* The ``chat`` and ``execute_tool`` spans hold exactly the attributes of the conventions
  chosen (issue 53 item 4): 1.37.0 by default, GenAI v0.1.0 under
  ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` (a second app run on the
  same engine and Jaeger), the histaudit attributes the same in both.
* ``prove --jaeger --trace-id --span-id`` writes a bundle; ``verify --bundle`` lists the
  span as proven; the bundle's spans.json changed by a byte is a finding.
* A span whose leaf hash is not the ledger's (a trace file edited, or a ledger rewritten
  since) is ``span-unproven``: exit 1 and no bundle. Bad input (no such trace or span, an
  unreachable backend, a file that is not OTLP JSON, another ledger's span) is one line,
  exit 2.

Cost: ≈ 12 s of CPU, 13 s of wall, measured (one Jaeger, one engine, two app runs; the
opt-in's run adds ≈ 2 s of CPU to the 10 s the file took with one).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from histaudit.ledger import merkle
from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from histaudit.testing.engine import EngineProcess
from support.apps import AppProcess, AppRig, wait_until
from support.cli import cli, exits, one_error_line
from support.jaeger import Jaeger
from support.ledgers import read_entries

pytestmark = [pytest.mark.engine, pytest.mark.jaeger]

APP = Path(__file__).resolve().parent / "apps" / "traced_app.py"
SERVICE = "histaudit-traced-app"
PROOF = {"histaudit.ledger.origin", "histaudit.instance", "histaudit.entry.seq",
         "histaudit.entry.leaf", "histaudit.entry.leaf_hash", "histaudit.entry.kind"}
CHAT_1_37 = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "stub-1",
             "gen_ai.response.model": "stub-1", "gen_ai.usage.input_tokens": 11,
             "gen_ai.usage.output_tokens": 7, "gen_ai.response.finish_reasons": ["tool_calls"]}
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "write_note",
        "gen_ai.tool.type": "function", "gen_ai.tool.call.id": "call_1",
        "histaudit.effect.name": "tool:write_note"}


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    with Jaeger(tmp_path_factory.mktemp("jaeger")) as backend:
        yield backend


class Run:
    """One ``assist`` workflow run by the traced app, its ledger and its spans."""

    def __init__(self, tmp: Path, jaeger: Jaeger, engine: EngineProcess,
                 env: dict[str, str] | None = None) -> None:
        self.tmp, self.jaeger = tmp, jaeger
        self.db = f"sqlite:///{tmp / 'ledger.db'}"
        self.key, self.pub, _ = generate_keypair(tmp / "keys", name="app")
        with AppRig(engine) as rig:
            app = rig.add_app(AppProcess(
                engine, [APP], log=tmp / "app.log", ready="APP READY", ready_timeout=60,
                env={"HISTAUDIT_DB": self.db, "HISTAUDIT_KEY": str(self.key),
                     "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": jaeger.otlp_traces,
                     "PYTHONUNBUFFERED": "1", **(env or {})}))
            app.start()
            self.instance = rig.schedule("assist", "call the vendor")
            state = rig.wait(self.instance, timeout=60)
            assert state.runtime_status.name == "COMPLETED", app.tail()
            self.spans: list[dict[str, Any]] = []

            def exported() -> bool:
                self.spans = [s for s in jaeger.find_spans(SERVICE)
                              if s["attrs"].get("histaudit.instance") == self.instance]
                return len(self.spans) >= 5
            wait_until(exported, 30, "the run's 5 spans in Jaeger", details=app.tail)
        self.entries = {e.seq: e for e in read_entries(self.db, self.instance)}

    def span(self, name: str) -> dict[str, Any]:
        (found,) = [s for s in self.spans if s["name"] == name]
        return found

    def prove(self, *args: str) -> Any:
        return cli("prove", *args, "--db", self.db, "--key", str(self.key),
                   "--trust", str(self.pub), cwd=self.tmp)


    def attrs(self, name: str) -> dict[str, Any]:
        """The span's attributes with their OTLP types: an ``intValue`` (JSON: a string)
        as an int, an ``arrayValue`` as a list."""
        def plain(value: dict[str, Any]) -> Any:
            ((kind, inner),) = value.items()
            if kind == "intValue":
                return int(inner)
            if kind == "arrayValue":
                return [plain(v) for v in inner.get("values", [])]
            return inner
        return {a["key"]: plain(a["value"]) for a in self.span(name)["attributes"]}


@pytest.fixture(scope="module")
def traced_engine(tmp_path_factory: pytest.TempPathFactory,
                  engine_binary: Path) -> Iterator[EngineProcess]:
    engine = EngineProcess(binary=engine_binary,
                           state_dir=tmp_path_factory.mktemp("traced-engine"))
    engine.start()
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="module")
def run(jaeger: Jaeger, tmp_path_factory: pytest.TempPathFactory,
        traced_engine: EngineProcess) -> Run:
    return Run(tmp_path_factory.mktemp("traced"), jaeger, traced_engine)


@pytest.fixture(scope="module")
def run_latest(jaeger: Jaeger, tmp_path_factory: pytest.TempPathFactory,
               traced_engine: EngineProcess) -> Run:
    """The same app with the current GenAI conventions chosen (and an unrelated value in
    the list, as an app that opts in for HTTP too would have)."""
    return Run(tmp_path_factory.mktemp("traced-latest"), jaeger, traced_engine,
               {"OTEL_SEMCONV_STABILITY_OPT_IN": "http/dup,gen_ai_latest_experimental"})


def check_proof_attributes(run: Run) -> None:
    """Each span names its entry: same origin, and the entry at that seq has that leaf,
    leaf hash and kind."""
    with Ledger.open(run.db) as ledger:
        origin = f"histaudit/{ledger.ledger_id}"
    for span in run.spans:
        a = span["attrs"]
        entry = run.entries[int(a["histaudit.entry.seq"])]
        assert a["histaudit.ledger.origin"] == origin
        assert a["histaudit.instance"] == run.instance
        assert int(a["histaudit.entry.leaf"]) == entry.leaf
        assert a["histaudit.entry.leaf_hash"] == merkle.leaf_hash(entry.body).hex()
        assert a["histaudit.entry.kind"] == entry.kind


def genai_and_effect(attrs: dict[str, Any]) -> dict[str, Any]:
    """A span's attributes besides the proof's (whose keys must all be there)."""
    assert attrs.keys() >= PROOF, attrs
    return {k: v for k, v in attrs.items() if k not in PROOF}


def test_each_call_is_a_genai_span_naming_its_signed_entry(run: Run) -> None:
    names = sorted(s["name"] for s in run.spans)
    assert names == ["activity ask_llm", "activity tally", "activity write_note",
                     "chat stub-1", "execute_tool write_note"], names
    check_proof_attributes(run)
    assert run.span("chat stub-1")["attrs"]["histaudit.entry.kind"] == "llm.call"
    assert run.span("execute_tool write_note")["attrs"]["histaudit.entry.kind"] == "effect.done"
    assert run.span("activity tally")["attrs"]["histaudit.entry.kind"] == "activity.completed"
    # The LLM call and the tool call happen inside their activities: child spans.
    for child, parent in (("chat stub-1", "activity ask_llm"),
                          ("execute_tool write_note", "activity write_note")):
        assert run.span(child)["parentSpanId"] == run.span(parent)["spanId"]


@pytest.mark.parametrize(("which", "chat"), [
    ("run", CHAT_1_37),
    ("run_latest", {**CHAT_1_37, "gen_ai.provider.name": "stub"}),
], ids=["default-1.37.0", "gen_ai_latest_experimental-v0.1.0"])
def test_chat_and_execute_tool_spans_hold_exactly_the_chosen_conventions(
        request: pytest.FixtureRequest, which: str, chat: dict[str, Any]) -> None:
    """Read back from Jaeger: the exact attribute set of each, besides the proof's (Jaeger
    keeps no scope schema URL; tests/unit/interceptor/test_genai_conventions.py checks it)."""
    chosen: Run = request.getfixturevalue(which)
    assert sorted(s["name"] for s in chosen.spans) == [
        "activity ask_llm", "activity tally", "activity write_note", "chat stub-1",
        "execute_tool write_note"]
    check_proof_attributes(chosen)
    assert genai_and_effect(chosen.attrs("chat stub-1")) == chat
    done = chosen.entries[int(chosen.span("execute_tool write_note")["attrs"][
        "histaudit.entry.seq"])]
    assert genai_and_effect(chosen.attrs("execute_tool write_note")) == {
        **TOOL, "histaudit.effect.key": done.data["key"]}  # the activity's execution id
    assert (chosen.span("chat stub-1")["kind"], chosen.span("execute_tool write_note")["kind"]
            ) == (3, 1)  # OTLP SPAN_KIND_CLIENT, SPAN_KIND_INTERNAL


def test_prove_turns_a_span_from_jaeger_into_a_bundle_verified_offline(run: Run) -> None:
    tool = run.span("execute_tool write_note")
    out = run.tmp / "proof-tool"
    r = run.prove("--jaeger", run.jaeger.url, "--trace-id", tool["traceId"],
                  "--span-id", tool["spanId"], "--out", str(out))
    exits(r)
    assert f"span {tool['spanId']} execute_tool write_note: entry " in r.stdout, r.stdout
    assert "proved 1 span(s): 1 instance(s)" in r.stdout, r.stdout
    v = cli("verify", "--bundle", str(out), "--trust", str(run.pub), "--json", cwd=run.tmp)
    exits(v)
    doc = json.loads(v.stdout)
    assert doc["ok"] is True
    (span,) = doc["spans"]
    assert (span["span_id"], span["instance"], span["kind"]) == \
        (tool["spanId"], run.instance, "effect.done")
    assert span["seq"] == int(tool["attrs"]["histaudit.entry.seq"])
    text = cli("verify", "--bundle", str(out), "--trust", str(run.pub), cwd=run.tmp)
    exits(text)
    assert f"span {tool['spanId']} execute_tool write_note: entry {span['seq']}" in text.stdout
    assert text.stdout.rstrip().endswith("proven"), text.stdout

    # spans.json is signed in the manifest: a changed seq is a finding, never a proof
    listed = json.loads((out / "spans.json").read_bytes())
    listed["spans"][0]["seq"] += 1
    (out / "spans.json").write_text(json.dumps(listed, indent=2))
    bad = cli("verify", "--bundle", str(out), "--trust", str(run.pub), "--json", cwd=run.tmp)
    assert bad.returncode == 1, bad.stdout
    codes = {f["code"] for rep in json.loads(bad.stdout)["reports"] for f in rep["findings"]}
    assert {"bundle-file-changed", "span-unproven"} <= codes, codes


def test_prove_takes_every_span_of_a_trace_file(run: Run) -> None:
    """A trace kept as OTLP JSON (what a SIEM stores) proves without the backend."""
    chat = run.span("chat stub-1")
    doc = run.jaeger.get(f"/api/v3/traces/{chat['traceId']}")
    trace_file = run.tmp / "trace.json"
    trace_file.write_text(json.dumps(doc))
    out = run.tmp / "proof-file"
    r = run.prove("--trace-file", str(trace_file), "--out", str(out))
    exits(r)
    # the LLM call's trace holds its activity's span too: both are proven
    assert "proved 2 span(s)" in r.stdout, r.stdout
    exits(cli("verify", "--bundle", str(out), "--trust", str(run.pub), cwd=run.tmp))


def test_a_span_the_ledger_does_not_hold_as_named_is_unproven(run: Run) -> None:
    tally = run.span("activity tally")
    doc = run.jaeger.get(f"/api/v3/traces/{tally['traceId']}")
    for resource in doc["result"]["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for attr in span["attributes"]:
                    if attr["key"] == "histaudit.entry.leaf_hash":
                        attr["value"]["stringValue"] = "0" * 64
    trace_file = run.tmp / "edited.json"
    trace_file.write_text(json.dumps(doc))
    out = run.tmp / "proof-edited"
    r = run.prove("--trace-file", str(trace_file), "--out", str(out))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "span-unproven" in r.stdout and "the entry there is another" in r.stdout, r.stdout
    assert not out.exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["--trace-id", "f" * 32], "has no trace " + "f" * 32),
    (["--trace-id", "xyz"], "is not 32 hex digits"),
    (["--span-id", "0" * 16], "the trace has no span " + "0" * 16),
    (["--trace-file", "{not json"], "is not JSON"),
    (["--trace-file", '{"resourceSpans": 3}'], "is not OTLP JSON traces"),
    (["--unreachable"], "cannot reach the trace backend"),
    (["--other-ledger"], "names ledger histaudit/"),
])
def test_bad_input_is_one_line_and_exit_2(run: Run, args: list[str], needle: str) -> None:
    tool = run.span("execute_tool write_note")
    if args[0] == "--trace-file":
        path = run.tmp / "bad-trace.json"
        path.write_text(args[1])
        argv = ["--trace-file", str(path)]
    elif args[0] == "--unreachable":
        argv = ["--jaeger", "http://127.0.0.1:9", "--trace-id", tool["traceId"]]
    elif args[0] == "--other-ledger":
        other = run.tmp / "other.db"
        Ledger.open(f"sqlite:///{other}", create=True).close()
        argv = ["--jaeger", run.jaeger.url, "--trace-id", tool["traceId"]]
        r = cli("prove", *argv, "--out", str(run.tmp / "never"), "--db",
                f"sqlite:///{other}", "--key", str(run.key), "--trust", str(run.pub),
                cwd=run.tmp)
        one_error_line(r, needle)
        assert not (run.tmp / "never").exists()
        return
    elif args[0] == "--span-id":
        argv = ["--jaeger", run.jaeger.url, "--trace-id", tool["traceId"], *args]
    else:
        argv = ["--jaeger", run.jaeger.url, *args]
    with Ledger.open(run.db) as ledger:
        before = ledger.leaf_count()
    r = run.prove(*argv, "--out", str(run.tmp / "never"))
    one_error_line(r, needle)
    assert not (run.tmp / "never").exists()
    with Ledger.open(run.db) as ledger:
        assert ledger.leaf_count() == before  # nothing written: no checkpoint, no entry
