"""histaudit.usercode: the one loader of MODULE:NAME and path/to/file.py:NAME."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from histaudit import usercode
from histaudit.errors import InputError, UsageError

DOCS_APP = """
import dapr.ext.workflow as wf

wfr = wf.WorkflowRuntime(host="127.0.0.1", port="1")


@wfr.workflow(name="greeting_wf")
def greeting(ctx, name):
    out = yield ctx.call_activity(hello, input=name)
    return out


def plain(ctx, x):
    return x


@wfr.activity
def hello(ctx, name):
    return "hi " + name
"""


@pytest.fixture
def app_file(tmp_path: Path) -> Path:
    path = tmp_path / "docs_app_for_usercode.py"
    path.write_text(DOCS_APP)
    return path


def test_load_a_file_reference_and_its_workflows(app_file: Path) -> None:
    greeting = usercode.load(f"{app_file}:greeting", "--workflow")
    functions = usercode.workflow_functions(greeting)
    assert list(functions) == ["greeting_wf"]
    assert functions["greeting_wf"].__code__.co_argcount == 2  # the real workflow
    plain = usercode.load(f"{app_file}:plain")
    assert usercode.workflow_functions(plain) == {"plain": plain}
    mapping = usercode.workflow_functions({"a": greeting, "b": plain})
    assert mapping["a"] is functions["greeting_wf"] and mapping["b"] is plain


def test_find_runtime_finds_the_module_level_runtime(app_file: Path) -> None:
    module = usercode.load_module(str(app_file))
    assert usercode.find_runtime(module) is module.wfr


def test_a_dotted_module_resolves_from_the_current_directory(
        tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "pkg_for_usercode").mkdir()
    (tmp_path / "pkg_for_usercode" / "__init__.py").write_text("")
    (tmp_path / "pkg_for_usercode" / "mod.py").write_text("class K:\n    value = 41\n")
    monkeypatch.chdir(tmp_path)
    assert usercode.load("pkg_for_usercode.mod:K.value") == 41
    assert usercode.resolve_ref("pkg_for_usercode.mod", "target") == "pkg_for_usercode.mod"


@pytest.mark.parametrize(("ref", "needle"), [
    ("no-colon", "expected MODULE:FUNCTION"),
    ("surely_no_such_module_x:f", "cannot import surely_no_such_module_x"),
    ("/no/such/file.py:f", "no file /no/such/file.py"),
])
def test_bad_references_are_one_line_input_errors(ref: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle) as info:
        usercode.load(ref, "--workflow")
    assert "\n" not in str(info.value) and str(info.value).startswith("--workflow ")


def test_an_import_that_raises_is_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken_for_usercode.py"
    bad.write_text("raise RuntimeError('boom\\nsecond line')\n")
    with pytest.raises(InputError, match="RuntimeError: boom second line"):
        usercode.load(f"{bad}:x")


def test_missing_attribute_and_bad_refs(app_file: Path) -> None:
    with pytest.raises(InputError, match="has no 'nope'"):
        usercode.load(f"{app_file}:nope")
    with pytest.raises(UsageError, match="expected a dotted module name"):
        usercode.resolve_ref("not a module", "target")
    with pytest.raises(InputError, match="no such file"):
        usercode.resolve_ref("missing.py", "target")
    with pytest.raises(UsageError, match="not a workflow"):
        usercode.workflow_functions(42)
