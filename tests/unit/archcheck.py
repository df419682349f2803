"""Reading lazyd's source as a graph, for the architecture test (test_architecture.py).

Everything here works on the source with ``ast``, never by importing it, so that a module that
breaks a rule is caught even when importing it would fail or hide the import (a function-level
import, one under ``TYPE_CHECKING``, one made with ``importlib.import_module("...")``).

What is collected per module: its dotted name, its line count, every import (resolved to an
absolute module name, marked when it sits under ``if TYPE_CHECKING:``), and its classes with their
bases resolved to the project class they name, where they name one.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

STDLIB: frozenset[str] = frozenset(sys.stdlib_module_names) | {"__future__"}


@dataclass(frozen=True)
class Import:
    target: str  # an absolute dotted module name
    line: int
    type_checking: bool  # under `if TYPE_CHECKING:`: a type's dependency, nothing at run time

    @property
    def top(self) -> str:
        return self.target.split(".")[0]


@dataclass
class ClassInfo:
    name: str
    line: int
    bases: list[str]  # each base as "module.Class" when it is a project class, else its source text


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: list[Import] = field(default_factory=list)
    classes: list[ClassInfo] = field(default_factory=list)
    # Names bound at the top level by imports: local name -> "module" or "module.attr".
    bindings: dict[str, str] = field(default_factory=dict)
    class_names: set[str] = field(default_factory=set)  # every class defined in it, at any depth


def module_name(package: str, root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def load(roots: Mapping[str, Path]) -> dict[str, Module]:
    """Every module under each root (package name -> its directory), parsed and resolved."""
    found: dict[str, tuple[Path, ast.Module, bool]] = {}
    for package, root in roots.items():
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            name = module_name(package, root, path)
            found[name] = (path, ast.parse(path.read_text(), str(path)), path.name == "__init__.py")
    modules: dict[str, Module] = {}
    for name, (path, tree, is_package) in found.items():
        module = Module(name, path, len(path.read_text().splitlines()))
        _Collector(module, is_package, set(found)).visit(tree)
        module.class_names = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        modules[name] = module
    for module in modules.values():
        module.classes = _classes(module, found[module.name][1], modules)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Collector(ast.NodeVisitor):
    def __init__(self, module: Module, is_package: bool, known: set[str]) -> None:
        self.module = module
        self.package = module.name if is_package else module.name.rpartition(".")[0]
        self.known = known
        self.type_checking = 0
        self.depth = 0  # > 0 inside a function or class: no top-level binding

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.type_checking += 1
            for child in node.body:
                self.visit(child)
            self.type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _scoped(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def _add(self, target: str, node: ast.stmt | ast.expr) -> None:
        self.module.imports.append(Import(target, node.lineno, self.type_checking > 0))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)
            if self.depth == 0:
                self.module.bindings[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, node.module] if node.module else base)
        else:
            source = node.module or ""
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            # `from lazyd import wire` imports the module lazyd.wire; `from x import Name` imports x.
            self._add(submodule if submodule in self.known else source, node)
            if self.depth == 0:
                self.module.bindings[alias.asname or alias.name] = submodule

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        dynamic = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
            isinstance(func, ast.Name) and func.id == "import_module")
        if dynamic and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            self._add(node.args[0].value, node)
        self.generic_visit(node)


def _classes(module: Module, tree: ast.Module, modules: Mapping[str, Module]) -> list[ClassInfo]:
    out = []
    local = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = [resolve_base(module, base, local, modules) for base in node.bases]
            out.append(ClassInfo(node.name, node.lineno, bases))
    return out


def resolve_base(module: Module, base: ast.expr, local: set[str], modules: Mapping[str, Module]) -> str:
    """A base class expression as "module.Class" when it names a project class, else its text."""
    if isinstance(base, ast.Subscript):  # Generic[T] and the like
        base = base.value
    if isinstance(base, ast.Name):
        if base.id in local:
            return f"{module.name}.{base.id}"
        bound = module.bindings.get(base.id)
        return _follow(bound, modules) if bound else base.id
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
        bound = module.bindings.get(base.value.id)
        if bound is not None:
            return _follow(f"{bound}.{base.attr}", modules)
    return ast.unparse(base)


def _follow(dotted: str, modules: Mapping[str, Module], hops: int = 0) -> str:
    # "pkg.mod.Name": if pkg.mod only re-exports Name from elsewhere, follow it to its definition.
    owner, _, name = dotted.rpartition(".")
    module = modules.get(owner)
    if module is None or hops > 10:
        return dotted
    if name in module.class_names or name not in module.bindings:
        return dotted
    return _follow(module.bindings[name], modules, hops + 1)


def project_class_depth(qualname: str, classes: Mapping[str, ClassInfo], seen: tuple[str, ...] = ()) -> int:
    """How many project classes long the longest chain ending in `qualname` is (itself included)."""
    info = classes.get(qualname)
    if info is None or qualname in seen:
        return 0
    parents = [project_class_depth(b, classes, (*seen, qualname)) for b in info.bases if b in classes]
    return 1 + max(parents, default=0)


def all_classes(modules: Iterable[Module]) -> dict[str, ClassInfo]:
    return {f"{m.name}.{c.name}": c for m in modules for c in m.classes}


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or one importing itself
    (Tarjan's algorithm, iterative so that a long chain cannot overflow the stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(sorted(component))
    return found
