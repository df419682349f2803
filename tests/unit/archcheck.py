"""Reading lazyd's source as a graph, for the architecture test (test_architecture.py).

Everything here works on the source with ``ast``, never by importing it, so that a module that
breaks a rule is caught even when importing it would fail or hide the import (a function-level
import, one under ``TYPE_CHECKING``, one made with ``importlib.import_module("...")``).

Names are resolved as Python resolves them: each function, lambda, class body and comprehension is
a scope, a name bound anywhere in a function is local to all of it, a class body is not seen from
the functions inside it, and `global` / `nonlocal` are honoured. A name bound nowhere is a builtin.
So `open` is the builtin unless a def, a parameter, an assignment or an import of that name
shadows it, and `il.import_module` is `importlib.import_module` after `import importlib as il`.

What is collected per module: its dotted name, its source and line count, every import (resolved
to an absolute module name, marked when it sits under ``if TYPE_CHECKING:``), every reference to a
builtin and to a name of another module (dotted, as resolved), the dynamic imports whose module
name is not a literal, the private names it defines and the private names it reaches, and its
classes with their bases resolved ("module.Class" for a project class, the dotted name of what
was imported or `builtins.X` for anything else).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

STDLIB: frozenset[str] = frozenset(sys.stdlib_module_names) | {"__future__"}

# Calls that import a module named by their first argument; a literal name is an import like any
# other, a computed one hides what is imported and is refused (test_architecture.py).
IMPORTERS: frozenset[str] = frozenset({"importlib.import_module", "importlib.__import__", "builtins.__import__",
                                       "runpy.run_module"})
# Calls that load code from a file path: what they import cannot be read from the source at all.
PATH_LOADERS: frozenset[str] = frozenset({
    "runpy.run_path", "importlib.util.spec_from_file_location", "importlib.util.spec_from_loader",
    "importlib.machinery.SourceFileLoader", "importlib.machinery.SourcelessFileLoader",
    "importlib.machinery.ExtensionFileLoader", "zipimport.zipimporter", "pkgutil.get_loader", "imp.load_source",
})


@dataclass(frozen=True)
class Import:
    target: str  # an absolute dotted module name
    line: int
    type_checking: bool  # under `if TYPE_CHECKING:`: a type's dependency, nothing at run time

    @property
    def top(self) -> str:
        return self.target.split(".")[0]


@dataclass(frozen=True)
class Use:
    """A reference in the source: `what` as resolved (e.g. "builtins.open", "posixpath.join")."""
    what: str
    line: int
    type_checking: bool = False


@dataclass(frozen=True)
class PrivateUse:
    """`name` (a private name: one leading underscore) reached from this module.

    `owner` is the project module the source says it belongs to (`module._x`, `from m import _x`,
    `Class._x` of an imported class); None for `obj._x`, whose owner is found by who defines it."""
    name: str
    line: int
    text: str
    owner: str | None


@dataclass
class ClassInfo:
    name: str
    line: int
    bases: list[str]  # "module.Class" for a project class, else the dotted name it resolves to


@dataclass
class Module:
    name: str
    path: Path
    source: str
    lines: int
    is_package: bool
    imports: list[Import] = field(default_factory=list)
    classes: list[ClassInfo] = field(default_factory=list)
    # Names bound at the top level by imports: local name -> "module" or "module.attr".
    bindings: dict[str, str] = field(default_factory=dict)
    class_names: set[str] = field(default_factory=set)  # every class defined in it, at any depth
    uses: list[Use] = field(default_factory=list)  # builtins and other modules' names, as referenced
    dynamic: list[tuple[int, str]] = field(default_factory=list)  # (line, why) of unreadable imports
    private_defs: set[str] = field(default_factory=set)
    private_uses: list[PrivateUse] = field(default_factory=list)
    docstring: str | None = None


def is_private(name: str) -> bool:
    """`_x`: not a dunder, not `_` alone, not an enum-style `_sunder_` (`_value_`, `_missing_`)."""
    return (name.startswith("_") and not name.startswith("__") and name != "_"
            and not (name.endswith("_") and len(name) > 2))


def module_name(package: str, root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def load(roots: Mapping[str, Path]) -> dict[str, Module]:
    """Every module under each root (package name -> its directory), parsed once and resolved."""
    found: dict[str, tuple[Path, str, ast.Module]] = {}
    for package, root in roots.items():
        for path in sorted(root.rglob("*.py")):
            source = path.read_text()
            found[module_name(package, root, path)] = (path, source, ast.parse(source, str(path)))
    modules: dict[str, Module] = {}
    for name, (path, source, tree) in found.items():
        module = Module(name, path, source, len(source.splitlines()), path.name == "__init__.py")
        module.class_names, module.private_defs = _definitions(tree)
        module.docstring = ast.get_docstring(tree)
        modules[name] = module
    for name, (_, _, tree) in found.items():
        _Collector(modules[name], modules).run(tree)
    return modules


def project_module_of(dotted: str, modules: Mapping[str, Module]) -> str | None:
    """The longest prefix of `dotted` that is a project module (None: not the project's)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def follow(dotted: str, modules: Mapping[str, Module], hops: int = 0) -> str:
    """`pkg.mod.Name` where pkg.mod only re-exports Name: followed to the module defining it."""
    owner, _, name = dotted.rpartition(".")
    module = modules.get(owner)
    if module is None or hops > 10 or name in module.class_names or name not in module.bindings:
        return dotted
    return follow(module.bindings[name], modules, hops + 1)


# --- private names defined ----------------------------------------------------------------------------


def _definitions(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The classes a module defines (at any depth), and the private names it defines: its defs and
    classes, its module and class level names (dataclass fields included) and the names in a
    `__slots__`. The attributes a method assigns on its own `self` or `cls` are added by the collector, which
    knows the scopes (`obj._x = ...` on another object defines nothing)."""
    classes: set[str] = set()
    out: set[str] = set()

    def top_level(body: Iterable[ast.stmt]) -> None:  # module or class level: names, not locals
        for stmt in body:
            targets: list[ast.expr] = []
            if isinstance(stmt, ast.Assign):
                targets = list(stmt.targets)
            elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
                targets = [stmt.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name) and is_private(node.id):
                        out.add(node.id)
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets):
                out.update(n.value for n in ast.walk(stmt.value)
                           if isinstance(n, ast.Constant) and isinstance(n.value, str) and is_private(n.value))
            if isinstance(stmt, (ast.If, ast.Try, ast.With)):  # a conditional definition is still one
                top_level(stmt.body)
                top_level(getattr(stmt, "orelse", []))
            if isinstance(stmt, ast.ClassDef):
                top_level(stmt.body)

    top_level(tree.body)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if is_private(node.name):
                out.add(node.name)
            if isinstance(node, ast.ClassDef):
                classes.add(node.name)
    return classes, out


# --- scopes -------------------------------------------------------------------------------------------

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
LOCAL = "<local>"  # a binding that is not an import: a def, a parameter, an assignment...


@dataclass
class _Scope:
    kind: str  # "module", "function", "class", "comprehension"
    bound: dict[str, str] = field(default_factory=dict)  # name -> imported dotted name, or LOCAL
    globals: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)
    self_name: str | None = None  # a method's first parameter: its own `self` or `cls`


def _children_in_scope(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes evaluated in the scope that `node` opens (not those of scopes nested in it)."""
    if isinstance(node, _FUNCTIONS):
        a = node.args  # the defaults are the enclosing scope's (_outer_parts), the annotations its own
        yield from (arg.annotation for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                                                *([a.kwarg] if a.kwarg else [])] if arg.annotation is not None)
        yield from (node.body if isinstance(node.body, list) else [node.body])
    elif isinstance(node, ast.ClassDef):
        yield from node.body
    elif isinstance(node, _COMPREHENSIONS):
        yield from ast.iter_child_nodes(node)
    else:
        yield from ast.iter_child_nodes(node)


def _outer_parts(node: ast.AST) -> Iterator[ast.AST]:
    """The parts of a scope-opening node evaluated in the enclosing scope."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        yield from node.decorator_list
        yield from node.args.defaults
        yield from (d for d in node.args.kw_defaults if d is not None)
        if node.returns is not None:
            yield node.returns
    elif isinstance(node, ast.Lambda):
        yield from node.args.defaults
        yield from (d for d in node.args.kw_defaults if d is not None)
    elif isinstance(node, ast.ClassDef):
        yield from node.decorator_list
        yield from node.bases
        yield from node.keywords


def _walk_scope(node: ast.AST) -> Iterator[ast.AST]:
    """Every node of the scope `node` opens, stopping at nested scopes (which are yielded, so that
    their names and their outer parts count here)."""
    stack = list(_children_in_scope(node))
    while stack:
        child = stack.pop()
        yield child
        if isinstance(child, (*_FUNCTIONS, ast.ClassDef, *_COMPREHENSIONS)):
            if not isinstance(child, _COMPREHENSIONS):
                stack.extend(_outer_parts(child))
            continue
        stack.extend(ast.iter_child_nodes(child))


def _import_binding(alias: ast.alias, source: str | None) -> tuple[str, str]:
    if source is None:  # `import a.b` binds a; `import a.b as c` binds c to a.b
        return (alias.asname, alias.name) if alias.asname else (alias.name.split(".")[0], alias.name.split(".")[0])
    return alias.asname or alias.name, f"{source}.{alias.name}"


class _Collector:
    def __init__(self, module: Module, modules: Mapping[str, Module]) -> None:
        self.module = module
        self.modules = modules
        self.package = module.name if module.is_package else module.name.rpartition(".")[0]
        self.chain: list[_Scope] = []
        self.type_checking = 0
        self.called: set[int] = set()  # ids of the func nodes of calls

    # -- binding ---------------------------------------------------------------------------------

    def _from_source(self, node: ast.ImportFrom) -> str:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            return ".".join([*base, node.module] if node.module else base)
        return node.module or ""

    def _scope_of(self, node: ast.AST, kind: str) -> _Scope:
        scope = _Scope(kind)
        if isinstance(node, _FUNCTIONS):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                        *([a.kwarg] if a.kwarg else [])]:
                scope.bound[arg.arg] = LOCAL
        for child in _walk_scope(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
                scope.bound.setdefault(child.id, LOCAL)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                scope.bound[child.name] = LOCAL
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    name, dotted = _import_binding(alias, None)
                    scope.bound[name] = dotted
            elif isinstance(child, ast.ImportFrom):
                source = self._from_source(child)
                for alias in child.names:
                    if alias.name != "*":
                        name, dotted = _import_binding(alias, source)
                        scope.bound[name] = dotted
            elif isinstance(child, ast.ExceptHandler) and child.name:
                scope.bound[child.name] = LOCAL
            elif isinstance(child, (ast.MatchAs, ast.MatchStar)) and child.name:
                scope.bound[child.name] = LOCAL
            elif isinstance(child, ast.MatchMapping) and child.rest:
                scope.bound[child.rest] = LOCAL
            elif isinstance(child, ast.Global):
                scope.globals.update(child.names)
            elif isinstance(child, ast.Nonlocal):
                scope.nonlocals.update(child.names)
        for name in scope.globals | scope.nonlocals:
            scope.bound.pop(name, None)
        return scope

    def resolve_name(self, name: str) -> str:
        """What `name` means here: an imported dotted name, "<module>.<name>" for a name of this
        module or a local, or "builtins.<name>"."""
        inner = self.chain[-1]
        scopes = [self.chain[0]] if name in inner.globals else [
            s for i, s in enumerate(reversed(self.chain)) if i == 0 or s.kind != "class"]
        for scope in scopes:
            if scope is inner and name in scope.nonlocals:
                continue
            if name in scope.bound:
                dotted = scope.bound[name]
                return f"{self.module.name}.{name}" if dotted == LOCAL else dotted
        return f"builtins.{name}"

    def resolve(self, node: ast.expr) -> str | None:
        """A name or attribute chain as a dotted name (None for anything else: a call's result...)."""
        if isinstance(node, ast.Name):
            return self.resolve_name(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    # -- walking ---------------------------------------------------------------------------------

    def run(self, tree: ast.Module) -> None:
        self.chain = [self._scope_of(tree, "module")]
        self.module.bindings = {k: v for k, v in self.chain[0].bound.items() if v != LOCAL}
        for stmt in tree.body:
            self.visit(stmt)

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef, *_COMPREHENSIONS)):
            for part in _outer_parts(node):
                self.visit(part)
            if isinstance(node, ast.ClassDef):
                self._class(node)
            kind = ("function" if isinstance(node, _FUNCTIONS) else
                    "class" if isinstance(node, ast.ClassDef) else "comprehension")
            scope = self._scope_of(node, kind)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and self.chain[-1].kind == "class":
                positional = [*node.args.posonlyargs, *node.args.args]
                scope.self_name = positional[0].arg if positional else None
            self.chain.append(scope)
            for child in _children_in_scope(node):
                self.visit(child)
            self.chain.pop()
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            self.visit(node.test)
            self.type_checking += 1
            for child in node.body:
                self.visit(child)
            self.type_checking -= 1
            for child in node.orelse:
                self.visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._import(alias.name, node)
                self._private_module(alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            self._import_from(node)
        elif isinstance(node, ast.Call):
            self.called.add(id(node.func))  # a call is visited before its func
            self._call(node)
        elif isinstance(node, ast.Attribute):
            if isinstance(node.ctx, (ast.Store, ast.Del)) and is_private(node.attr) and self._is_own(node.value):
                self.module.private_defs.add(node.attr)
            if self._reference(node):
                return  # a whole chain: its inner names were resolved with it
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            self._reference(node)
        for child in ast.iter_child_nodes(node):
            self.visit(child)

    # -- what is recorded ------------------------------------------------------------------------

    def _is_own(self, node: ast.expr) -> bool:
        """Whether `node` is the `self` (or `cls`) of the method it is used in, or of one enclosing it."""
        if not isinstance(node, ast.Name):
            return False
        for i, scope in enumerate(reversed(self.chain)):
            if (i == 0 or scope.kind != "class") and node.id in scope.bound:
                return scope.self_name == node.id
        return False

    def _import(self, target: str, node: ast.AST) -> None:
        self.module.imports.append(Import(target, getattr(node, "lineno", 0), self.type_checking > 0))

    def _import_from(self, node: ast.ImportFrom) -> None:
        source = self._from_source(node)
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            # `from lazyd.protocol import wire` imports the module lazyd.protocol.wire; `from x import Name` imports x.
            self._import(submodule if submodule in self.modules else source, node)
            if alias.name != "*":
                self.module.uses.append(Use(submodule, node.lineno, self.type_checking > 0))
            if is_private(alias.name) and source in self.modules and source != self.module.name:
                if not (submodule in self.modules and self.package == source):  # a package's own private module
                    self.module.private_uses.append(
                        PrivateUse(alias.name, node.lineno, f"from {source} import {alias.name}", source))

    def _private_module(self, target: str, node: ast.AST) -> None:
        parts = target.split(".")
        for end in range(1, len(parts)):
            if is_private(parts[end]) and ".".join(parts[:end]) != self.package:
                self.module.private_uses.append(
                    PrivateUse(parts[end], getattr(node, "lineno", 0), f"import {target}", ".".join(parts[:end])))
                return

    def _reference(self, node: ast.Name | ast.Attribute) -> bool:
        """Record a name or attribute chain; True when it was resolved as a whole."""
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            self._private_attribute(node)
        dotted = self.resolve(node)
        if dotted is None:
            return False
        if not dotted.startswith(self.module.name + "."):
            self.module.uses.append(Use(dotted, node.lineno, self.type_checking > 0))
        if id(node) not in self.called and dotted in IMPORTERS | PATH_LOADERS:
            self.module.dynamic.append((node.lineno, f"takes {dotted} without calling it"))
        # Inner private attributes of the chain (`a._b.c`) are still friend accesses.
        inner: ast.expr = node.value if isinstance(node, ast.Attribute) else node
        while isinstance(inner, ast.Attribute):
            if is_private(inner.attr):
                self._private_attribute(inner)
            inner = inner.value
        return True

    def _private_attribute(self, node: ast.Attribute) -> None:
        base = self.resolve(node.value)
        owner = None
        if base is not None and not base.startswith(self.module.name + "."):
            project = project_module_of(follow(base, self.modules), self.modules)
            owner = project if project != self.module.name else None
        self.module.private_uses.append(PrivateUse(node.attr, node.lineno, ast.unparse(node), owner))

    def _call(self, node: ast.Call) -> None:
        callee = self.resolve(node.func)
        if callee in IMPORTERS:
            arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                self._import(arg.value, node)
            else:
                self.module.dynamic.append((node.lineno, f"calls {callee} with a computed name"))
        elif callee in PATH_LOADERS:
            self.module.dynamic.append((node.lineno, f"loads code from a path with {callee}"))
        if callee in ("builtins.getattr", "builtins.hasattr", "builtins.delattr", "builtins.setattr") and (
                len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str) and is_private(node.args[1].value)):
            self.module.private_uses.append(
                PrivateUse(node.args[1].value, node.lineno, ast.unparse(node), None))

    def _class(self, node: ast.ClassDef) -> None:
        bases = []
        for base in node.bases:
            if isinstance(base, ast.Subscript):  # Generic[T] and the like
                base = base.value
            dotted = self.resolve(base)
            if dotted is None:
                bases.append(ast.unparse(base))
                continue
            if dotted.startswith(self.module.name + ".") and dotted.rpartition(".")[2] in self.module.class_names:
                bases.append(dotted)
            else:
                bases.append(follow(dotted, self.modules))
        self.module.classes.append(ClassInfo(node.name, node.lineno, bases))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


# --- what the names resolve to outside the project ----------------------------------------------------


def outside_object(dotted: str) -> object | None:
    """The object `dotted` names outside the project ("builtins.ConnectionError", "socket.timeout"),
    imported from the standard library or an installed package; None when there is none."""
    if dotted.startswith("builtins."):
        return getattr(builtins, dotted.removeprefix("builtins."), None)
    parts = dotted.split(".")
    for end in range(len(parts) - 1, 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attr in parts[end:]:
            value = getattr(value, attr, None)
            if value is None:
                return None
        return value
    return None


def is_outside_exception(dotted: str) -> bool:
    value = outside_object(dotted)
    return isinstance(value, type) and issubclass(value, BaseException)


# --- classes and cycles -------------------------------------------------------------------------------


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
