"""No import cycle among first-party modules, imports inside functions included.

import-linter sees only what Python imports at run time of a module's top level; a cycle hidden
behind a function-level import still ties the modules together (one cannot be read, tested or
moved without the other). This check reads the source instead: every `import` statement
anywhere in a module, relative ones resolved, `from package import module` taken as an import
of that module, `if TYPE_CHECKING:` imports left out (they never run).
"""

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Top-level package name -> the folder that holds it.
PACKAGE_PARENTS = {
    "tfplatform": ROOT / "platform",
    "tfplatform_cli": ROOT / "platform",
    "training": ROOT,
    "serving": ROOT,
    "bench": ROOT,
    "confinement": ROOT,
}


def modules_find(*, parents: dict[str, Path]) -> dict[str, Path]:
    """Every module of the packages that exist, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package, parent in parents.items():
        top = parent / package
        if not (top / "__init__.py").is_file():
            continue
        for path in sorted(top.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(parent).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                yield from _imports_in(child)
            continue
        yield from _imports_in(node)


def _imports_in(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _imports(node)


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest first-party module that `name` is or lies in."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def module_imports(*, name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The first-party modules this module imports, anywhere in its source."""
    is_package = path.name == "__init__.py"
    own_package = name if is_package else name.rpartition(".")[0]
    imported: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets: Iterable[str] = (alias.name for alias in node.names)
        else:
            if node.level:
                base_parts = own_package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from package import module` imports that module; `from module import name`
            # imports the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        for target in targets:
            known = _known(target, modules)
            if known is not None and known != name:
                imported.add(known)
    return imported


def import_graph(*, modules: dict[str, Path]) -> dict[str, set[str]]:
    return {name: module_imports(name=name, path=path, modules=modules)
            for name, path in modules.items()}


def cycles_find(*, graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components)


def cycle_path(*, component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete cycle through a component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for successor in sorted(graph[node] & members):
            if successor == start:
                return paths[node] + [start]
            if successor not in paths:
                paths[successor] = paths[node] + [successor]
                queue.append(successor)
    return component


def cycles_describe(*, parents: dict[str, Path]) -> list[str]:
    graph = import_graph(modules=modules_find(parents=parents))
    return [" -> ".join(cycle_path(component=component, graph=graph))
            + f"  (component: {', '.join(component)})"
            for component in cycles_find(graph=graph)]


def test_no_import_cycle_among_first_party_modules() -> None:
    cycles = cycles_describe(parents=PACKAGE_PARENTS)
    assert not cycles, "import cycles, function-level imports included:\n" + "\n".join(cycles)


def test_the_check_finds_a_cycle_behind_function_level_and_relative_imports(
        tmp_path: Path) -> None:
    package = tmp_path / "loop"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "a.py").write_text("from loop.inner import b\n")
    (package / "inner" / "b.py").write_text("def f():\n    from .. import c\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import loop.d\n"
        "def g():\n    import loop.a\n")
    (package / "d.py").write_text("import loop.c\n")
    assert cycles_describe(parents={"loop": tmp_path}) == [
        "loop.a -> loop.inner.b -> loop.c -> loop.a  (component: loop.a, loop.c, loop.inner.b)"]
