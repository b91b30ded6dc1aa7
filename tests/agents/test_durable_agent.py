"""dapr-agents' DurableAgent audited with ``audit_agent``, on real daprd, crashed where a
tool call or an LLM call is most at risk. Cost: ≈ 35 s of CPU (six daprd stacks, eleven
app starts).

The agent (``examples/durable_agent/app.py``, with its state store
``components/agent-workflow.yaml``) asks the example's stub LLM, runs ``lookup`` (declared
read-only), then ``write_note`` (writes a line), then answers. What a user relies on:

* a clean run signs the write as the side effect ``tool:write_note`` and the lookup not
  at all; ``verify`` is clean;
* a crash after the tool's activity body (its effect recorded done, its result not yet
  back at daprd): the re-delivered call does not run the tool again — one line — and
  ``verify`` names it ``effect-deduplicated``;
* a crash inside the effect (after the tool ran, before its done record): the retry
  cannot know and runs it again — two lines — and ``verify`` says ``effect-uncertain``
  for ``tool:write_note``;
* each execution of the guarded tool is one Agent Action Capsule in ``export --format
  scitt`` (issue #53), accepted by the profile's reference verifier with the disposition
  the ledger implies: executed; executed then deduplicated; uncertain then executed
  (≈ 0.5 s of CPU per export and its checks);
* every LLM call is signed with its model, tokens and requested tools; a crash after
  ``summarize`` (which has no guard of its own) repeats its LLM call and ``verify`` says
  what that cost (``llm-call-repeated``); a crash after ``call_llm`` repeats nothing,
  because the agent's state store hands the re-delivery its recorded answer;
* without that state store a crash makes the agent lose its conversation and start over:
  ``verify`` says ``conversation-restarted``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_action_capsule import verify_store
from agent_action_capsule.transparent import verify_transparent
from examples.durable_agent.stub_llm import StubLLM

from histaudit.bundle.cose import pem
from histaudit.crash import CRASH_EXIT_CODE
from histaudit.ledger.keys import generate_keypair
from histaudit.testing import teardown
from histaudit.testing.daprd import DaprdStack
from support.apps import AppProcess, AppRig, wait_until
from support.cli import cli
from support.jaeger import Jaeger
from support.repo import REPO
from support.scitt import payload_of

pytestmark = [pytest.mark.daprd, pytest.mark.crash, pytest.mark.engine]

EXAMPLE = REPO / "examples" / "durable_agent"
APP = EXAMPLE / "app.py"
WORKFLOW = "dapr.agents.scribe.workflow"
RUN_TOOL = "dapr.agents.scribe.run_tool"


class Scribe(AppRig):
    def __init__(self, tmp: Path, engine: Any, llm: StubLLM) -> None:
        super().__init__(engine)
        self.tmp = tmp
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        self.key, self.trust, signer = generate_keypair(tmp / "keys", name="agent")
        self.pem = tmp / "agent.pem"
        self.pem.write_bytes(pem(signer.public))
        self.notes = tmp / "notes.txt"
        self.app = self.add_app(AppProcess(
            engine, [APP], log=tmp / "app.log", ready="ready", ready_timeout=90,
            env={"HISTAUDIT_DB": self.url, "HISTAUDIT_KEY": str(self.key), "DATA_DIR": str(tmp),
                 "STUB_LLM_URL": llm.url, "PYTHONUNBUFFERED": "1"}))

    def lines(self) -> list[str]:
        return self.notes.read_text().splitlines() if self.notes.exists() else []

    def verify(self, instance: str) -> tuple[int, list[dict[str, Any]]]:
        r = cli("verify", instance, "--json", "--db", self.url, "--trust", self.trust,
                cwd=self.tmp)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
        return r.returncode, json.loads(r.stdout)["reports"][0]["findings"]

    def crash_and_resume(self, crash_at: str) -> str:
        """Tell the agent "note hello" with the app crashing at ``crash_at``, start the app
        again, and return the instance once it completed."""
        self.app.start(HISTAUDIT_CRASH_AT=crash_at)
        instance = self.schedule(WORKFLOW, {"task": "note hello"})
        assert self.app.wait_exit(120) == CRASH_EXIT_CODE, self.app.tail()
        self.app.start()
        assert self.wait(instance, 180).runtime_status.name == "COMPLETED", self.app.tail()
        return instance

    def entries(self, instance: str) -> list[dict[str, Any]]:
        r = cli("show", instance, "--json", "--db", self.url, cwd=self.tmp)
        assert r.returncode == 0, r.stderr
        return list(json.loads(r.stdout)["entries"])

    def effects(self, instance: str) -> list[tuple[str, str]]:
        return [(e["kind"], e["data"]["name"]) for e in self.entries(instance)
                if e["kind"].startswith("effect.")]

    def capsules(self, instance: str) -> list[str]:
        """Export the instance as SCITT statements (issue #53) and return its Capsules'
        dispositions, each accepted by the profile's reference verifier: Class 1 over the
        store of them, and anchored by its receipt (``--transparent``, through scitt-cose)."""
        out = self.tmp / f"scitt-{instance}"
        r = cli("export", instance, "--format", "scitt", "--out", out, "--db", self.url,
                "--key", self.key, "--trust", self.trust, cwd=self.tmp)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        index = json.loads((out / "scitt" / "index.json").read_bytes())
        files = [out / c["file"] for c in index["capsules"]]
        capsules = [json.loads(payload_of(f)) for f in files]
        for result in verify_store(capsules):
            assert result.ok and {f.severity for f in result.findings} <= {"info"}, \
                result.findings
        for file, capsule in zip(files, capsules, strict=True):
            leaf = payload_of(out / "scitt" / "entries" / file.name).hex()
            report = verify_transparent(statement_path=str(file), issuer_key_path=str(self.pem),
                                        log_key_path=str(self.pem), leaf_entry_hex=leaf)
            assert report.ok and report.attestation_tier == "anchored", \
                report.substrate_errors
            assert capsule.get("effect", {}).get("type", "tool:write_note") == \
                "tool:write_note", capsule
        return [c["disposition"]["verdict_class"] for c in capsules]

    def llm_calls(self, instance: str) -> list[tuple[str, list[str], int | None]]:
        """(activity, tools asked for, total tokens) of each signed LLM call."""
        return [(e["data"]["activity"].rsplit(".", 1)[1], e["data"]["tool_calls"],
                 e["data"]["total_tokens"])
                for e in self.entries(instance) if e["kind"] == "llm.call"]


def stack(tmp_path: Path, *, agent_store: bool) -> Iterator[tuple[Scribe, StubLLM]]:
    """The example's components (its state store at a relative path, so in the stack's
    own directory), or none."""
    engine = DaprdStack(state_dir=tmp_path / "engine",
                        resources=EXAMPLE / "components" if agent_store else None)
    engine.start()
    try:
        with StubLLM() as llm, Scribe(tmp_path, engine, llm) as rig:
            yield rig, llm
    finally:
        teardown(engine)


@pytest.fixture
def scribe(tmp_path: Path) -> Iterator[tuple[Scribe, StubLLM]]:
    """daprd with the agent's own state store (``agent-workflow``): without it a
    DurableAgent restarts its conversation after a crash (ADR 0012)."""
    yield from stack(tmp_path, agent_store=True)


@pytest.fixture
def forgetful_scribe(tmp_path: Path) -> Iterator[tuple[Scribe, StubLLM]]:
    """daprd without the agent's state store."""
    yield from stack(tmp_path, agent_store=False)


def test_a_clean_run_signs_the_writing_tool_only(scribe: tuple[Scribe, StubLLM]) -> None:
    rig, llm = scribe
    with Jaeger(rig.tmp) as jaeger:
        rig.app.env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = jaeger.otlp_traces
        instance = _clean_run(rig, llm)
        _spans_name_their_entries(rig, jaeger, instance)


def _spans_name_their_entries(rig: Scribe, jaeger: Jaeger, instance: str) -> None:
    """The run's spans in a real Jaeger: GenAI's ``chat`` for each LLM call and
    ``execute_tool`` for the guarded tool, with the LLM's tool call id, each naming its
    signed entry; the read-only tool has no record and so no span."""
    spans: list[dict[str, Any]] = []

    def exported() -> bool:
        spans[:] = [s for s in jaeger.find_spans("scribe")
                    if s["attrs"].get("histaudit.instance") == instance]
        return sum(s["name"].startswith(("chat", "execute_tool")) for s in spans) >= 5
    wait_until(exported, 30, "the agent's spans in Jaeger", details=rig.app.tail)
    by_seq = {e["seq"]: e for e in rig.entries(instance)}
    calls = sorted(s["name"] for s in spans if not s["name"].startswith("activity "))
    assert calls == ["chat stub-1"] * 4 + ["execute_tool write_note"], calls
    (tool,) = [s["attrs"] for s in spans if s["name"] == "execute_tool write_note"]
    assert tool["gen_ai.tool.call.id"] == StubLLM.TOOL_TURNS[1][0]
    for span in spans:
        entry = by_seq[int(span["attrs"]["histaudit.entry.seq"])]
        assert span["attrs"]["histaudit.entry.kind"] == entry["kind"]
    assert {by_seq[int(s["attrs"]["histaudit.entry.seq"])]["kind"] for s in spans
            if s["name"] == "chat stub-1"} == {"llm.call"}


def _clean_run(rig: Scribe, llm: StubLLM) -> str:
    rig.app.start()
    instance = rig.schedule(WORKFLOW, {"task": "note hello"})
    assert rig.wait(instance, 120).runtime_status.name == "COMPLETED", rig.app.tail()
    assert rig.lines() == ["hello"] and llm.calls == 4  # three turns, then summarize
    # the component's relative path put the agent's state in this stack's own directory
    assert (rig.tmp / "engine" / "agent-state.db").stat().st_size > 0
    assert rig.effects(instance) == [("effect.intent", "tool:write_note"),
                                     ("effect.done", "tool:write_note")]
    # structured output (the summary) comes back from dapr-agents without usage; its token
    # count is the provider's own, read from the OpenAI client's raw answer (issue 48)
    assert rig.llm_calls(instance) == [("call_llm", ["Lookup"], 15),
                                       ("call_llm", ["WriteNote"], 15),
                                       ("call_llm", [], 15), ("summarize", [], 15)]
    assert rig.verify(instance) == (0, [])
    assert rig.capsules(instance) == ["executed"]  # the guarded tool's one Capsule
    # replay finds the agent's workflow at import (audit_agent registered it there), given
    # the sidecar dapr-agents asks for its metadata; it replays to the signed output
    r = cli("replay", "--workflow", f"{APP}:wfr", "--engine", rig.engine.address, instance,
            "--db", rig.url, cwd=rig.tmp,
            env={**rig.engine.env({}), "DATA_DIR": str(rig.tmp), "STUB_LLM_URL": llm.url})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return instance


def test_replay_without_a_sidecar_says_how_in_one_line(tmp_path: Path) -> None:
    """dapr-agents 1.0.9 cannot build an agent offline (it asks daprd for metadata)."""
    (tmp_path / "history.json").write_text("{}")
    r = cli("replay", "--workflow", f"{APP}:wfr", "--history", tmp_path / "history.json",
            cwd=tmp_path, env={"DAPR_HEALTH_TIMEOUT": "1", "DAPR_HTTP_PORT": "9",
                               "DAPR_GRPC_PORT": "9", "DATA_DIR": str(tmp_path)})
    ours = [line for line in r.stderr.splitlines() if line.startswith("histaudit:")]
    assert r.returncode == 2 and len(ours) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "AgentError: Failed to bootstrap agent" in ours[0]
    assert "needs a running Dapr sidecar when it is imported: run this command under " \
           "`dapr run" in ours[0]
    assert not (tmp_path / "notes.txt").exists()


@pytest.mark.parametrize(("crash_at", "calls", "repeated"), [
    ("after:dapr.agents.scribe.summarize", 5,
     "summarize (task 9) called the LLM in 2 executions: the crash cost 1 LLM call and 15 "
     "tokens of stub-1"),
    ("after:dapr.agents.scribe.call_llm#2", 4, None),
])
def test_a_crash_after_an_llm_call_is_costed(scribe: tuple[Scribe, StubLLM], crash_at: str,
                                             calls: int, repeated: str | None) -> None:
    rig, llm = scribe
    instance = rig.crash_and_resume(crash_at)
    assert llm.calls == calls and len(rig.llm_calls(instance)) == calls
    _, findings = rig.verify(instance)
    costed = [f["message"] for f in findings if f["code"] == "llm-call-repeated"]
    assert costed == ([] if repeated is None else [costed[0]]), findings
    assert repeated is None or repeated in costed[0]
    assert rig.lines() == ["hello"]


def test_an_agent_without_its_state_store_restarts_and_verify_says_so(
        forgetful_scribe: tuple[Scribe, StubLLM]) -> None:
    rig, llm = forgetful_scribe
    instance = rig.crash_and_resume("after-effect:tool:write_note")
    assert "has no state store" in (rig.tmp / "app.log").read_text()  # audit_agent warned
    assert llm.calls > 4 and len(rig.lines()) > 2  # it began again and wrote again
    _, findings = rig.verify(instance)
    restarted = [f for f in findings if f["code"] == "conversation-restarted"]
    assert len(restarted) == 1, findings
    assert "sent the LLM 1 message after task 5 had sent 4" in restarted[0]["message"]


@pytest.mark.parametrize(("crash_at", "lines", "code", "capsules"), [
    (f"after:{RUN_TOOL}#2", ["hello"], "effect-deduplicated", ["executed", "deduplicated"]),
    ("after-effect:tool:write_note", ["hello", "hello"], "effect-uncertain",
     ["uncertain", "executed"]),
])
def test_a_crash_around_the_tool_is_accounted_for(scribe: tuple[Scribe, StubLLM],
                                                  crash_at: str, lines: list[str],
                                                  code: str, capsules: list[str]) -> None:
    rig, _ = scribe
    instance = rig.crash_and_resume(crash_at)
    assert rig.lines() == lines
    _, findings = rig.verify(instance)
    named = [f for f in findings if f["code"] == code]
    assert named and named[0]["effect"]["name"] == "tool:write_note", findings
    assert "tool:lookup" not in json.dumps(findings)
    assert rig.capsules(instance) == capsules  # one per execution of the guarded tool


def test_python_is_the_venv_with_dapr_agents() -> None:
    import dapr_agents

    assert Path(dapr_agents.__file__).is_relative_to(Path(sys.prefix))


def test_audit_agent_refuses_what_is_not_an_agent_and_unknown_read_only_tools() -> None:
    from dapr_agents import tool
    from dapr_agents.tool.executor import AgentToolExecutor

    from histaudit.agents import audit_agent
    from histaudit.errors import UsageError

    @tool
    def lookup(topic: str) -> str:
        """Look a topic up."""
        return topic

    class Agentish:
        def __init__(self) -> None:
            self.tool_executor = AgentToolExecutor(tools=[lookup])
            self.registered: list[Any] = []

        def register(self, runtime: Any) -> None:
            self.registered.append(runtime)

    with pytest.raises(UsageError, match="is not a dapr-agents DurableAgent"):
        audit_agent(object())
    with pytest.raises(UsageError, match=r"read_only names 'lokup'.*its tools: lookup"):
        audit_agent(Agentish(), read_only=["lokup"])
    agent = Agentish()
    runtime = audit_agent(agent, read_only=["Lookup"])  # any spelling the agent resolves
    assert agent.registered == [runtime]
    stateless = Agentish()
    stateless._infra = type("Infra", (), {"state_store": None})()  # type: ignore[attr-defined]
    with pytest.warns(UserWarning, match="no state store .*'agent-workflow'"):
        audit_agent(stateless)
