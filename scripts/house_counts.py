"""The code-health counts issues #41 and #51 ask for, from the tree as it stands.

    .venv/bin/python scripts/house_counts.py

Prints: files per package of ``src/histaudit``, the largest file, import loops (strongly
connected components of grimp's import graph of ``histaudit``, type-checking imports left
out: they never run), private names imported across packages and within them (an ``ast``
walk of ``from histaudit… import _name``), ``os.environ`` reads outside the edges (the
modules that read configuration on purpose, listed in ``EDGES``), the README's size; and
for issue #51: import loops counting type-checking imports too, modules outside the store
importing a store driver, the signer and driver registries with the seam each entry's
class implements, and every function of 60 lines or more with the reason it stays so.
"""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "histaudit"
EDGES = ("config.py", "cli/", "interceptor/runtime.py", "crash.py", "testing/",
         "crashtest/sandbox.py", "crashtest/worker.py")
"""Where the environment is read on purpose: the configuration snapshot itself, the CLI,
the runtime's construction, crash points (the harness's channel into an app) and the
process launchers (CONTRIBUTING.md, "What is in the box")."""


STORE = "histaudit.ledger.store"
DRIVER_MODULES = ("histaudit.ledger.store.sqlite", "histaudit.ledger.store.postgres")
LONG = 60
LONG_FUNCTIONS: dict[str, str] = {
    "histaudit.bundle.verify.verify_bundle":
        "docs/bundle.md §9's steps in order, each a named helper; 17 lines of docstring",
    "histaudit.verify.dapr_history.verify_dapr_history":
        "the walk over signatures with its state (link, contiguity, sound prefix); rows, "
        "chains and each signer are named steps",
    "histaudit.bundle.export._bundle_files":
        "the bundle's files in the order docs/bundle.md lists them, a few lines each",
    "histaudit.crashtest.sweep.sweep_points":
        "one algorithm: sweep, re-sweep without culprits, vouch (ADR 0006); half docstring",
    "histaudit.verify.scan.ChainScan.run":
        "the verifier's per-row hot loop (figure 3a), inlined on purpose: a call per row",
    "histaudit.cli.replay.replay":
        "a click command: the checks of its flag combinations, then one call per mode",
    "histaudit.cli.crashtest.crashtest":
        "a click command: its options turned into one CrashSpec, then one call",
    "histaudit.witness.policy.WitnessPolicy.parse":
        "a parser of the C2SP policy grammar: one branch per keyword, line numbers kept",
    "histaudit.verify.crosscheck._crosscheck":
        "one pass over the engine's events against the signed completions, in event order",
    "histaudit.bundle.compliance.build":
        "the period report's sections in document order, as its schema lists them",
    "histaudit.bundle.export.export":
        "one read snapshot, then checkpoint, files and signature in that order",
    "histaudit.crashtest.matrix.run_clean":
        "one clean run start to end in its sandbox; its failure cases are the docstring",
    "histaudit.bundle.scitt.scitt_files":
        "statements, receipts and Capsules of each instance in docs/scitt.md's order",
    "histaudit.testing.engine.EngineProcess._spawn_and_wait":
        "start and readiness wait with each way a start fails (port taken, exit, hang)",
    "histaudit.crashtest.matrix.run_matrix":
        "the matrix's plan: clean run, then app and engine crashes, sweeps or isolated",
}
"""Functions of ``LONG`` lines or more (docstring included) that stay long, each with
why, or ``NOT YET`` with what will split it (issue #51)."""


def long_functions(files: list[Path]) -> list[tuple[str, str, int]]:
    """(qualified name, file:line, lines) of every function of ``LONG`` lines or more,
    longest first; nested functions count inside their parent and on their own."""
    found = []
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        stack: list[tuple[ast.AST, str]] = [(tree, module_name(path))]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}.{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        lines = (child.end_lineno or child.lineno) - child.lineno + 1
                        if lines >= LONG:
                            found.append((name, f"{path.relative_to(SRC)}:{child.lineno}",
                                          lines))
                    stack.append((child, name))
    return sorted(found, key=lambda f: -f[2])


def registry(module: str, name: str) -> str:
    """A registry's entries, each with the class it names, and whether that class
    subclasses the seam (the signer Protocol or the driver base)."""
    import importlib

    from histaudit.ledger.keys import Signer
    from histaudit.ledger.store.driver import Driver

    table = getattr(importlib.import_module(module), name)
    seam = Signer if name == "SIGNERS" else Driver
    shown = []
    for key, where in table.items():
        mod, _, cls = where.partition(":")
        ok = seam in getattr(importlib.import_module(mod), cls).__mro__  # declared, not by shape
        shown.append(f"{key}={cls}{'' if ok else ' (NOT a ' + seam.__name__ + ')'}")
    return f"{len(table)} behind {seam.__name__} ({', '.join(shown)})"


def package_of(name: str) -> str:
    """The package a dotted name of histaudit lies in (a top-level module is its own)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "(top)"


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def private_imports(files: list[Path]) -> tuple[int, int]:
    """(across packages, within a package) counts of ``from histaudit… import _name``."""
    across = within = 0
    for path in files:
        here = module_name(path)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = here.split(".")
                base = base[:len(base) - node.level + (1 if is_pkg else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("histaudit"):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    if package_of(target) == package_of(here):
                        within += 1
                    else:
                        across += 1
    return across, within


def import_loops(graph: grimp.ImportGraph) -> list[set[str]]:
    index, low, on_stack, stack, loops = {}, {}, set(), [], []
    counter = 0

    def visit(node: str) -> None:  # Tarjan's algorithm, recursive: the graph is small
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.find_modules_directly_imported_by(node):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                loops.append(component)

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return loops


def main() -> None:
    files = sorted(SRC.rglob("*.py"))
    per_package = collections.Counter(
        "(top-level modules)" if f.parent == SRC else f.parent.relative_to(SRC).parts[0]
        for f in files)
    sizes = {f: len(f.read_text().splitlines()) for f in files}
    largest = max(sizes, key=lambda f: sizes[f])
    environ = [f"{f.relative_to(SRC)}:{n}" for f in files
               for n, line in enumerate(f.read_text().splitlines(), 1)
               if "os.environ" in line
               and not str(f.relative_to(SRC)).startswith(EDGES)]
    across, within = private_imports(files)
    runtime_graph = grimp.build_graph("histaudit", exclude_type_checking_imports=True,
                                      cache_dir=None)
    full_graph = grimp.build_graph("histaudit", cache_dir=None)
    loops, typed_loops = import_loops(runtime_graph), import_loops(full_graph)
    drivers = sorted(DRIVER_MODULES)
    outside = sorted({m for d in drivers for m in full_graph.find_modules_that_directly_import(d)
                      if not m.startswith(STORE)})
    long_ones = long_functions(files)
    print("files per package:", ", ".join(f"{p} {n}" for p, n in sorted(per_package.items())))
    print(f"largest file: {largest.relative_to(ROOT)}, {sizes[largest]} lines")
    print(f"import loops: {len(loops)}", *(sorted(loop) for loop in loops))
    print(f"import loops counting type-checking imports: {len(typed_loops)}",
          *(sorted(loop) for loop in typed_loops))
    print(f"modules outside store/ importing a store driver: {len(outside)}", *outside)
    print(f"signers: {registry('histaudit.ledger.signers', 'SIGNERS')}; "
          f"store drivers: {registry('histaudit.ledger.store.driver', 'DRIVERS')}")
    unexplained = [f for f in long_ones if f[0] not in LONG_FUNCTIONS]
    print(f"functions of {LONG} lines or more: {len(long_ones)}, {len(unexplained)} without "
          f"a reason")
    for name, where, lines in long_ones:
        print(f"  {lines:4d} {name} ({where}): {LONG_FUNCTIONS.get(name, 'NO REASON GIVEN')}")
    print(f"private names imported across packages: {across} (within packages: {within})")
    print(f"os.environ outside the edges: {len(environ)}", *environ)
    print(f"README: {len((ROOT / 'README.md').read_text())} characters")


if __name__ == "__main__":
    main()
