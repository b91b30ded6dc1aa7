"""The bundle's report.html, opened in a real headless Chromium.

The triage example (examples/triage) runs on the real engine and crashes right after its
side effect (``after_post``): the comment is posted, the completion never signed, Dapr
delivers ``post_comment`` again and the comment is posted twice. The ticket's title is
hostile HTML, so the activity results carry it. A second ticket runs cleanly. The real
``histaudit export`` writes the bundle with and without ``--with-payloads``.

Chromium is driven with its own flags, ``--dump-dom`` (the DOM it built, serialized),
``--screenshot`` and ``--print-to-pdf``: no driver to install, and the page runs no
script anyway. Its console log (``--enable-logging=stderr``) reports every
Content-Security-Policy violation, so a stylesheet the policy blocked fails the test.
"""

from __future__ import annotations

import io
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from histaudit.bundle.html import render_html
from histaudit.crash import CRASH_EXIT_CODE
from histaudit.ledger.checkpoint import Checkpoint
from histaudit.ledger.keys import generate_keypair
from histaudit.testing.engine import EngineProcess
from histaudit.verify.report import Report
from support.apps import AppProcess, AppRig
from support.chromium import Dom, Node, chromium, console_problems
from support.cli import cli, exits

# one xdist worker builds the module fixtures (reports) once (tests/conftest.py)
pytestmark = [pytest.mark.engine, pytest.mark.crash, pytest.mark.xdist_group("html_report")]

APP = Path(__file__).resolve().parents[2] / "examples" / "triage" / "app.py"
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"
WIDTH = 1280


# --- a real run with a crash, exported ----------------------------------------------------

@dataclass
class Reports:
    crashed: str
    clean: str
    with_payloads: Path
    without_payloads: Path
    tmp: Path

    def page(self, payloads: bool) -> Path:
        return (self.with_payloads if payloads else self.without_payloads) / "report.html"


class Triage(AppRig):
    def __init__(self, engine: EngineProcess, tmp: Path) -> None:
        super().__init__(engine)
        self.tmp = tmp
        (tmp / "data").mkdir()
        self.key, self.pub, _ = generate_keypair(tmp / "keys", name="triage")
        self.db = f"sqlite:///{tmp / 'ledger.db'}"
        self.env = {"DATA_DIR": str(tmp / "data"), "HISTAUDIT_DB": self.db,
                    "HISTAUDIT_KEY": str(self.key), "PYTHONUNBUFFERED": "1",
                    "IDEMPOTENT": "0"}

    def worker(self, name: str, **extra: str) -> AppProcess:
        app = AppProcess(self.engine, [APP, "worker"], log=self.tmp / f"{name}.log",
                         env=self.env, ready="worker ready", exit_timeout=60)
        self.add_app(app).start(**extra)
        return app

    def ticket(self, title: str) -> str:
        instance = f"ticket-{uuid.uuid4().hex[:8]}"
        self.client.schedule_new_workflow("triage", instance_id=instance,
                                          input={"id": instance, "title": title},
                                          start_at=datetime.now(UTC))
        return instance


@pytest.fixture(scope="module")
def reports(engine_binary: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Reports]:
    tmp = tmp_path_factory.mktemp("html-report")
    engine = EngineProcess(binary=engine_binary, state_dir=tmp / "engine")
    engine.start()
    try:
        with Triage(engine, tmp) as app:
            crashing = app.worker("crash", HISTAUDIT_CRASH_AT="after_post")
            crashed = app.ticket(HOSTILE)
            assert crashing.wait_exit() == CRASH_EXIT_CODE, crashing.tail()
            resumed = app.worker("resume")
            assert app.wait(crashed).runtime_status.name == "COMPLETED", resumed.tail()
            clean = app.ticket("Typo on the pricing page")
            assert app.wait(clean).runtime_status.name == "COMPLETED", resumed.tail()
        out = {}
        for name, flags in (("with", ["--with-payloads"]), ("without", [])):
            bundle = tmp / f"bundle-{name}"
            exits(cli("export", "--out", bundle, *flags, "--db", app.db, "--key", app.key,
                      "--trust", app.pub, cwd=tmp), 0)
            out[name] = bundle
        yield Reports(crashed, clean, out["with"], out["without"], tmp)
    finally:
        engine.kill()


def dom_of(reports: Reports, payloads: bool, name: str) -> Dom:
    r = chromium(reports.page(payloads), "--dump-dom", profile=reports.tmp / f"prof-{name}")
    assert console_problems(r.stderr) == [], console_problems(r.stderr)
    return Dom(r.stdout)


def section_of(dom: Dom, instance: str) -> Node:
    for s in dom.root.find("section", "instance"):
        h2 = s.find("h2")
        if h2 and h2[0].text.startswith(instance):
            return s
    raise AssertionError(f"no section for {instance}")


def drawn(svg: Node, cls: str) -> list[Node]:
    """The marks of class ``cls`` in the plot: each has a tooltip; the legend's have none."""
    return [m for m in svg.find(cls=cls) if m.find("title")]


# --- the tests ----------------------------------------------------------------------------

def test_report_in_chromium_findings_first_linked_and_the_crash_drawn(reports: Reports
                                                                      ) -> None:
    began = time.monotonic()
    dom = dom_of(reports, True, "with")
    ids = dom.by_id()

    # Nothing that runs or fetches: no script element, no handler, no outside URL.
    assert not [n for n in dom.all if n.tag in ("script", "iframe", "object", "embed",
                                                 "img", "link", "base", "form")]
    assert not [n for n in dom.all for a in n.attrs if a.startswith("on")]
    csp = [n for n in dom.all if n.tag == "meta"
           and n.attrs.get("http-equiv", "").lower() == "content-security-policy"]
    assert len(csp) == 1 and csp[0].attrs["content"].startswith("default-src 'none'")
    links = [n.attrs["href"] for n in dom.all if "href" in n.attrs]
    assert links and all(h.startswith("#") for h in links), links
    # Every link inside the page has its target.
    assert [h for h in links if h[1:] not in ids] == []

    crashed = section_of(dom, reports.crashed)
    # Findings come first, then the picture, then the steps, then the entries.
    order = [crashed.find("section", c)[0].order
             for c in ("findings", "picture", "steps", "entries")]
    assert order == sorted(order)
    rows = crashed.find("section", "findings")[0].find("tr")[1:]
    codes = {r.find("code")[0].text: r for r in rows}
    assert {"activity-reexecuted", "effect-duplicate"} <= set(codes)
    for row in codes.values():  # each finding links to entry rows that exist
        targets = [a.attrs["href"][1:] for a in row.find("a")]
        assert targets and all(ids[t].tag == "tr" for t in targets), row.text
    dup_targets = [ids[a.attrs["href"][1:]] for a in codes["effect-duplicate"].find("a")]
    assert any("effect.done" in t.text for t in dup_targets)

    # The picture: one SVG per instance; the crash, the re-delivery, the duplicate marked.
    svg = crashed.find("svg")
    assert len(svg) == 1
    marks = {c: drawn(svg[0], c) for c in ("crash", "redo", "dup", "eff", "att", "lane")}
    assert marks["crash"] and "(a crash)" in marks["crash"][0].text
    assert marks["redo"] and "delivered again: attempt 2 of post_comment" in \
        marks["redo"][0].text
    assert len(marks["dup"]) == 1 and "duplicate" in marks["dup"][0].text
    assert len(marks["lane"]) == 2  # two worker processes: the crashed one and its successor
    assert len(marks["att"]) == 3  # summarize once, post_comment twice
    assert len(marks["eff"]) == 1 and len(marks["redo"]) == 1 and len(marks["crash"]) == 2
    assert "legend" in svg[0].text
    clean_svg = section_of(dom, reports.clean).find("svg")[0]
    assert len(drawn(clean_svg, "att")) == 2 and len(drawn(clean_svg, "lane")) == 1
    assert not [c for c in ("crash", "redo", "dup") if drawn(clean_svg, c)]

    # The step table says what ran again and what was done twice.
    steps = crashed.find("section", "steps")[0].find("tr")
    post = next(r for r in steps if r.text.startswith("post_comment"))
    cells = [c.text for c in post.find("td")]
    assert cells[1].startswith("2 (") and cells[3].startswith("after a crash: attempt 1")
    assert "done 2×" in cells[4] and "DUPLICATE" in cells[4]
    assert cells[5].startswith("completed")

    # The hostile payload is text in a value cell, not markup.
    values = [n.text for n in crashed.find("code", "val")]
    assert any(f"Summary: {HOSTILE}" in v for v in values), values
    print(f"\nchromium dump-dom + checks: {time.monotonic() - began:.2f}s")


def test_report_without_payloads_shows_digests_not_values(reports: Reports) -> None:
    dom = dom_of(reports, False, "without")
    crashed = section_of(dom, reports.crashed)
    page = dom.root.text
    assert HOSTILE not in page and "Summary:" not in page
    assert not crashed.find("code", "val")
    digests = crashed.find("span", "h")
    assert digests and all(re.fullmatch(r"[0-9a-f]{64}", d.attrs["title"]) for d in digests
                           if d.parent is not None and "digest" in d.parent.text)
    assert "without payloads" in page
    # The same picture either way: it is drawn from the signed entries.
    svg = crashed.find("svg")[0]
    assert drawn(svg, "crash") and drawn(svg, "dup") and drawn(svg, "redo")


def test_screenshot_is_a_real_picture(reports: Reports) -> None:
    began = time.monotonic()
    shot = reports.tmp / "report.png"
    r = chromium(reports.page(True), f"--screenshot={shot}", f"--window-size={WIDTH},1800",
                 profile=reports.tmp / "prof-shot")
    took = time.monotonic() - began
    assert console_problems(r.stderr) == []
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(data)) as img:
        assert img.size == (WIDTH, 1800)
        rgb = img.convert("RGB")
        colours: Any = rgb.getcolors(maxcolors=1 << 16)
        pixels = WIDTH * 1800
    assert colours is not None and len(colours) > 50  # text, badges, worker colours
    white = sum(n for n, c in colours if c == (255, 255, 255))
    assert white < 0.97 * pixels  # not a blank page
    # The worker colours of the picture are on screen (the stylesheet was applied).
    present = {c for _, c in colours}
    assert (0x4E, 0x79, 0xA7) in present and (0xF2, 0x8E, 0x2B) in present
    print(f"\nchromium screenshot: {took:.2f}s")


def pdf_pages(page: Path, profile: Path) -> int:
    pdf = profile.with_suffix(".pdf")
    chromium(page, f"--print-to-pdf={pdf}", "--no-pdf-header-footer", profile=profile)
    return len(re.findall(rb"/Type\s*/Page(?![s\w])", pdf.read_bytes()))


def test_print_starts_every_instance_on_a_new_page(reports: Reports, tmp_path: Path) -> None:
    # Three instances that would all fit on the first page: the print stylesheet breaks
    # before each, so the summary and each instance get a page of their own.
    tiny = tmp_path / "tiny.html"
    tiny.write_bytes(render_html([Report(instance_id=f"tiny-{n}", entries=0, mode="default")
                                  for n in range(3)], origin="histaudit/tiny",
                                 checkpoint=Checkpoint("histaudit/tiny", 0, b"", b"", "k"),
                                 entries={}))
    assert pdf_pages(tiny, tmp_path / "prof-tiny") == 4
    # The real report prints too: the summary, then each of the two instances.
    assert pdf_pages(reports.page(True), reports.tmp / "prof-pdf") >= 3
