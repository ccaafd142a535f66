"""Find every error code the shipped package can answer, by reading its source.

A code is produced where it is written: a ``code="..."`` keyword (an error
raised, or a request field's refusal code), a class's ``default_code``, a
``code`` field or parameter default, and the ``code`` argument of any function
that takes one (``problem_response(status, title, code, ...)``), positional or
not. A code argument that is not a literal must be one the scan can follow: a
parameter of the function it is in (its callers are scanned), another error's
``.code`` passed on, or a name bound from a dict literal (``.get`` with a
default, or tuple unpacking: the table of refusals in engine/rules/holds.py).
Anything else is reported as unreadable, so a new way of producing codes fails
the test instead of slipping past it.

Codes are also *read*: compared with ``.code`` or looked up by it in a dict
literal (api/metrics.py counts a few). Those must name catalogued codes too.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from slotward.engine import errors

__all__ = ["Scan", "Site", "scan"]


@dataclass(frozen=True)
class Site:
    code: str
    where: str  # path:line
    made_by: str | None = None  # the error class constructed there, if one is


@dataclass
class Scan:
    produced: list[Site] = field(default_factory=list)
    read: list[Site] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # path:line of a code not followed

    def codes(self) -> set[str]:
        return {site.code for site in self.produced}


def _modules(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root, followlinks=True):  # slotward/ holds symlinks
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        yield from (Path(folder, f) for f in sorted(files) if f.endswith(".py"))


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _error_class(name: str | None) -> str | None:
    found = getattr(errors, name, None) if name else None
    is_error = isinstance(found, type) and issubclass(found, errors.SlotwardError)
    return name if is_error else None


def _code_params(trees: dict[Path, ast.Module]) -> dict[str, int | None]:
    """Functions taking a ``code`` parameter: its positional index (None: keyword only)."""
    out: dict[str, int | None] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                positional = [a.arg for a in node.args.posonlyargs + node.args.args]
                if "code" in positional:
                    out[node.name] = positional.index("code")
                elif "code" in [a.arg for a in node.args.kwonlyargs]:
                    out[node.name] = None
    return out


class _Module(ast.NodeVisitor):
    def __init__(self, path: Path, tree: ast.Module, params: dict[str, int | None], out: Scan):
        self.path, self.params, self.out = path, params, out
        self.dicts = {  # module-level NAME = {...}
            t.id: n.value
            for n in tree.body
            if isinstance(n, ast.Assign | ast.AnnAssign) and isinstance(n.value, ast.Dict)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        }
        self.scope: list[ast.FunctionDef | ast.AsyncFunctionDef] = []

    def _at(self, node: ast.AST) -> str:
        return f"{self.path}:{getattr(node, 'lineno', 0)}"

    def _produce(self, code: str, node: ast.AST, made_by: str | None = None) -> None:
        self.out.produced.append(Site(code, self._at(node), made_by))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        for arg, default in [
            *zip(args.args[len(args.args) - len(args.defaults) :], args.defaults, strict=True),
            *zip(args.kwonlyargs, args.kw_defaults, strict=True),
        ]:
            if arg.arg == "code" and default is not None and (code := _str(default)) is not None:
                self._produce(code, default)
        self.scope.append(node)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for stmt in node.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else []
            if isinstance(stmt, ast.AnnAssign):
                targets = [stmt.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            value = getattr(stmt, "value", None)
            if names & {"code", "default_code"} and (code := _str(value)) is not None:
                made_by = node.name if "default_code" in names else None
                self._produce(code, stmt, _error_class(made_by))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _name(node.func)
        made_by = _error_class(name)
        args: list[ast.expr] = [k.value for k in node.keywords if k.arg == "code"]
        index = self.params.get(name or "")
        if index is not None and len(node.args) > index:
            args.append(node.args[index])
        for arg in args:
            self._follow(arg, made_by)
        self._reads_by_lookup(node)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        if any(_is_code(side) for side in sides):
            for side in sides:
                items = side.elts if isinstance(side, ast.Tuple | ast.Set | ast.List) else [side]
                for item in items:
                    if (code := _str(item)) is not None:
                        self.out.read.append(Site(code, self._at(item)))
        self.generic_visit(node)

    def _reads_by_lookup(self, node: ast.Call) -> None:
        """``TABLE.get(error.code)`` reads every key of the dict literal TABLE."""
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and node.args:
            table = self.dicts.get(func.value.id) if isinstance(func.value, ast.Name) else None
            if table is not None and _is_code(node.args[0]):
                for key in table.keys:
                    if key is not None and (code := _str(key)) is not None:
                        self.out.read.append(Site(code, self._at(key)))

    def _follow(self, value: ast.expr, made_by: str | None) -> None:
        if (code := _str(value)) is not None:
            self._produce(code, value, made_by)
        elif isinstance(value, ast.Attribute) and value.attr == "code":
            pass  # another error's (or a field's) code, passed on: produced where it was made
        elif isinstance(value, ast.Name) and self._is_param(value.id):
            pass  # the function's own code parameter: its callers are scanned
        elif isinstance(value, ast.Name) and (found := self._bound(value.id)) is not None:
            for code_node in found:
                if (code := _str(code_node)) is not None:
                    self._produce(code, code_node, made_by)
                else:
                    self.out.unreadable.append(self._at(code_node))
        else:
            self.out.unreadable.append(self._at(value))

    def _is_param(self, name: str) -> bool:
        if not self.scope:
            return False
        args = self.scope[-1].args
        return name in {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}

    def _bound(self, name: str) -> list[ast.expr] | None:
        """The candidates of ``name`` bound in this function from a dict literal."""
        for node in ast.walk(self.scope[-1]) if self.scope else ():
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name) and target.id == name:
                return self._candidates(value, None)
            if isinstance(target, ast.Tuple):
                names = [t.id if isinstance(t, ast.Name) else None for t in target.elts]
                if name in names:
                    return self._candidates(value, names.index(name))
        return None

    def _candidates(self, value: ast.expr, index: int | None) -> list[ast.expr] | None:
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
            return None
        owner = value.func.value
        table = self.dicts.get(owner.id) if isinstance(owner, ast.Name) else owner
        if value.func.attr != "get" or not isinstance(table, ast.Dict):
            return None
        found = [v for v in table.values]
        found += value.args[1:2]  # the default
        if index is None:
            return found
        picked = [v.elts[index] for v in found if isinstance(v, ast.Tuple)]
        return picked if len(picked) == len(found) else None


def _is_code(node: ast.expr) -> bool:
    """``x.code`` or a bare ``code``: an error code being read."""
    if isinstance(node, ast.Attribute):
        return node.attr == "code"
    return isinstance(node, ast.Name) and node.id == "code"


def scan(root: Path) -> Scan:
    """Every code produced and read under ``root`` (followed through symlinks)."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in _modules(root)}
    params = _code_params(trees)
    out = Scan()
    for path, tree in trees.items():
        _Module(path.relative_to(root), tree, params, out).visit(tree)
    return out
