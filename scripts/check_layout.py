"""The house limits and the import rules, checked from the source (no imports, nothing run).

    python scripts/check_layout.py          # prints what breaks a rule; exit code 1 if anything does

1. No source file in app/ or gumiho_core/ over 600 lines (one concept per module: cohesion beats size); no function
   over 40.
2. No import cycle among the project's modules (imports inside functions count too).
3. Nothing imports upward: app/ uses only the public `gumiho_core` API (the package, never a module of it);
   the engine and gumiho_core/measure never import their front ends (the CLIs, the benchmark, training,
   the app); within app/, the pictures (app/render) and the backend (app/backend) know nothing of the
   page (layout, events, handlers, animation) nor of each other, and the data modules import neither.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "gumiho_core")
MAX_FILE_LINES, MAX_FUNCTION_LINES = 600, 40
PAGE = ("app.layout", "app.events", "app.handlers", "app.animation", "app.screen", "app.view")
ENTRY = ("gumiho_core.cli", "gumiho_core.bench", "gumiho_core.measure.bench", "gumiho_core.training")
FORBIDDEN = {  # importer prefix -> imported prefixes it must not use
    "gumiho_core": ("app", *ENTRY),  # the engine: none of its front ends
    "gumiho_core.measure": ("app", *ENTRY),
    "gumiho_core.measure.bench": ("app", "gumiho_core.training"),
    "gumiho_core.cli": ("app", "gumiho_core.training", "gumiho_core.measure.bench"),
    "gumiho_core.training": ("app",),
    "gumiho_core.train": ("app",),  # the -m entry points: each runs its command line
    "gumiho_core.generate": ("app",),
    "gumiho_core.bench": ("app",),
    "app.render": ("app.backend", *PAGE),
    "app.backend": ("app.render", *PAGE),
    "app.state": ("app.render", "app.backend", *PAGE),
    "app.settings": ("app.render", "app.backend", *PAGE),
    "app.stages": ("app.render", "app.backend", *PAGE),
    "app.runfile": ("app.render", "app.backend", *PAGE),
}
ALLOWED = {"gumiho_core.cli": ("gumiho_core.cli",), "gumiho_core.measure.bench": ("gumiho_core.measure.bench",),
           "gumiho_core.training": ("gumiho_core.training",)}  # themselves


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _absolute(name: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _bound(path: Path) -> set[str]:
    """Names a package's __init__ binds at its top level (those shadow submodules of the same name)."""
    out = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports (a `from package import name` of a submodule counts as that module,
    unless the package's __init__ binds that name itself)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(name, node, path.name == "__init__.py")
            found.add(base)
            shadowed = _bound(known[base]) if known.get(base, Path()).name == "__init__.py" else set()
            found |= {f"{base}.{a.name}" for a in node.names
                      if f"{base}.{a.name}" in known and a.name not in shadowed}
    return {m for m in found if m in known and m != name}


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _rule(importer: str) -> tuple[str, ...]:
    """The forbidden prefixes of the most specific rule that covers `importer`."""
    covering = [p for p in FORBIDDEN if _under(importer, p)]
    return FORBIDDEN[max(covering, key=len)] if covering else ()


def upward(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for importer, targets in sorted(graph.items()):
        own = ALLOWED.get(next((p for p in ALLOWED if _under(importer, p)), ""), ())
        for target in sorted(targets):
            if any(_under(target, p) for p in _rule(importer)) and not any(_under(target, p) for p in own):
                bad.append(f"{importer} imports {target}")
            if importer.startswith("app") and target.startswith("gumiho_core."):
                bad.append(f"{importer} imports {target}: the app uses the public gumiho_core API only")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def too_long(name: str, path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    rel = path.relative_to(ROOT)
    out = [f"{rel}: {len(text.splitlines())} lines"] if len(text.splitlines()) > MAX_FILE_LINES else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                out.append(f"{rel}:{node.lineno} {node.name}() {n} lines")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.parse_args(argv)
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    failures = []
    for name, path in known.items():
        failures.extend(too_long(name, path))
    failures += [" -> ".join(c) + " (a cycle)" for c in cycles(graph)]
    failures += upward(graph)
    for line in failures:
        print(line)
    print(f"{len(known)} modules, {sum(len(v) for v in graph.values())} imports: "
          + ("all rules kept" if not failures else f"{len(failures)} broken"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
