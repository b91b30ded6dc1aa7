"""The HTML pages' stylesheet and the Content-Security-Policy that allows it alone.

Kept apart from the page's assembly (:mod:`.html`): the policy names the stylesheet by its
SHA-256, so the two change together and nothing else does.
"""

from __future__ import annotations

import base64
import hashlib

__all__ = ["CSP", "STYLESHEET"]

STYLESHEET = """
:root{--ok:#137333;--bad:#b3261e;--warn:#8a5a00}
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:80em}
h1{font-size:1.5em;margin:0 0 .3em}h2{font-size:1.25em;margin:0;padding-top:.3em}
h3{font-size:1.05em;margin:1.2em 0 .3em;border-bottom:1px solid #ccc}
section.instance{margin-top:2.5em;border-top:3px solid #555}
table{border-collapse:collapse;width:100%;margin:.4em 0}
td,th{border:1px solid #ddd;padding:.2em .45em;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right;white-space:nowrap}
td.t,td.ev,td.wk{white-space:nowrap}
.ok{color:var(--ok);font-weight:bold}.bad{color:var(--bad);font-weight:bold}
.badge{display:inline-block;padding:0 .4em;border-radius:3px;font-size:.85em;
 font-weight:bold;color:#fff;background:#666}
.badge.error,.badge.dup{background:var(--bad)}.badge.warning{background:var(--warn)}
.badge.info{background:#3367d6}.badge.okb{background:var(--ok)}
tr.error td{background:#fde7e9}tr.warning td{background:#fff4d6}tr.info td{background:#eef4fd}
tr.retry td{background:#fff8e1}tr.flag td:first-child{border-left:4px solid var(--bad)}
tr.gap td{background:#f7f7f7;color:#555;font-style:italic}
tr:target td{outline:2px solid #1a73e8}
code,.mono{font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;
 overflow-wrap:anywhere}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:.2em 0;
 font:12px/1.35 ui-monospace,Menlo,Consolas,monospace}
.k{color:#555}.h{color:#555;font:12px ui-monospace,Menlo,Consolas,monospace}
.val{background:#f3f6f0;padding:0 .2em}.note{color:#555;font-size:.92em}
details summary{cursor:pointer}.meta{color:#444;margin:.2em 0}
.sw{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.25em;
 vertical-align:-.05em}
.w0{background:#4e79a7;fill:#4e79a7}.w1{background:#f28e2b;fill:#f28e2b}
.w2{background:#59a14f;fill:#59a14f}.w3{background:#b07aa1;fill:#b07aa1}
.w4{background:#76b7b2;fill:#76b7b2}.w5{background:#edc948;fill:#edc948}
.w6{background:#9c755f;fill:#9c755f}.w7{background:#bab0ac;fill:#bab0ac}
.wx{background:#999;fill:#999}
.figure{overflow-x:auto}
svg.run{display:block;max-width:100%;height:auto;font:11px system-ui,sans-serif}
svg.run .lbl{fill:#222}svg.run .note,svg.run .tick{fill:#666}
svg.run .axis{stroke:#999;stroke-width:1}
svg.run .lane{opacity:.45}svg.run .att{stroke:#333;stroke-width:.6}
svg.run .failedatt{stroke:var(--bad);stroke-width:2}
svg.run .crash{stroke:var(--bad);stroke-width:2.5;fill:none}
svg.run .redo{fill:#fff;stroke:#e37400;stroke-width:2.5}
svg.run .eff{fill:#1b5e20;stroke:#fff;stroke-width:.8}
svg.run .dup{fill:var(--bad);stroke:#fff;stroke-width:1}
svg.run .skip{fill:#fff;stroke:#1b5e20;stroke-width:1.5}
svg.run .intent{stroke:#222;stroke-width:1.5}
svg.run .llm{fill:#6a1b9a;stroke:#fff;stroke-width:.8}
svg.run .wf{fill:#333}svg.run .bad{fill:var(--bad)}svg.run .grp{fill:#ccc}
@media print{
 body{margin:0;max-width:none;font-size:10pt}
 section.instance{break-before:page;border-top:none}
 tr,svg.run{break-inside:avoid}thead{display:table-header-group}
 .figure{overflow:visible}a{color:inherit;text-decoration:none}
 .h .s{display:none}.h::after{content:attr(title);overflow-wrap:anywhere}
 details>*{display:block}details::details-content{content-visibility:visible;display:block}
 tr:target td{outline:none}
}
"""
_STYLESHEET_HASH = base64.b64encode(
    hashlib.sha256(STYLESHEET.encode("utf-8")).digest()).decode("ascii")
CSP = (f"default-src 'none'; style-src 'sha256-{_STYLESHEET_HASH}'; img-src data:; "
       "base-uri 'none'; form-action 'none'")
"""The page's Content-Security-Policy: its own stylesheet, nothing else."""
