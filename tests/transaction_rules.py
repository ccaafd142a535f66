"""The analyses behind the transaction ratchets of tests/test_architecture.py.

A rule about transactions must hold whatever a parameter is called: a use case
that names its unit of work ``work`` is held to it as one that names it
``uow`` (the rules once matched the names ``uow`` and ``clock``, so a rename
would have let a use case out of every one). The unit of work is any name
annotated ``UnitOfWork`` and the clock any name annotated ``Clock`` (a
parameter, or a variable), in the function that declares it and the functions
nested in it; mypy strict makes every parameter carry its annotation. A
transaction opens at ``with`` or ``async with`` over a unit of work.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

__all__ = [
    "CLOCK",
    "UNIT_OF_WORK",
    "calls_without_audit_key",
    "clock_reads_outside_a_transaction",
    "commits_without_tenant_lock",
    "keyed_use_cases",
    "touch_after_commit",
    "unseen_transactions",
]

UNIT_OF_WORK = "UnitOfWork"
CLOCK = "Clock"

_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _is_type(annotation: ast.expr | None, type_name: str) -> bool:
    """``annotation`` is ``type_name`` (or ``x.type_name``), optional or not.

    Not merely a mention: ``Callable[[UnitOfWork], T]`` is a function, not a
    unit of work.
    """
    match annotation:
        case ast.Name(id=name) | ast.Attribute(attr=name):
            return name == type_name
        case ast.BinOp(op=ast.BitOr(), left=left, right=right):
            return _is_type(left, type_name) or _is_type(right, type_name)
        case ast.Subscript(value=ast.Name(id="Optional") | ast.Attribute(attr="Optional")):
            return _is_type(annotation.slice, type_name)
        case ast.Constant(value=str(text)):  # a quoted annotation
            return _is_type(ast.parse(text, mode="eval").body, type_name)
    return False


def _declared(node: ast.AST, type_name: str) -> frozenset[str]:
    """Names ``node`` (a function or a module) declares of type ``type_name``."""
    names: set[str] = set()
    if isinstance(node, _Function):
        params = node.args
        every = [*params.posonlyargs, *params.args, *params.kwonlyargs]
        every += [a for a in (params.vararg, params.kwarg) if a is not None]
        names.update(a.arg for a in every if _is_type(a.annotation, type_name))
    for inner in ast.walk(node):
        if (
            isinstance(inner, ast.AnnAssign)
            and isinstance(inner.target, ast.Name)
            and _is_type(inner.annotation, type_name)
        ):
            names.add(inner.target.id)
    return frozenset(names)


def _visible(tree: ast.AST, type_name: str) -> dict[int, frozenset[str]]:
    """For every node of ``tree`` (by id), the names of type ``type_name`` in its scope."""
    seen: dict[int, frozenset[str]] = {}

    def visit(node: ast.AST, names: frozenset[str]) -> None:
        if isinstance(node, _Function):
            names = names | _declared(node, type_name)
        seen[id(node)] = names
        for child in ast.iter_child_nodes(node):
            visit(child, names)

    visit(tree, _declared(tree, type_name) if isinstance(tree, ast.Module) else frozenset())
    return seen


def _is_name(node: ast.AST, names: frozenset[str]) -> bool:
    return isinstance(node, ast.Name) and node.id in names


def _method_call(node: ast.AST, names: frozenset[str]) -> str | None:
    """The method called when ``node`` is ``name.method(...)`` for one of ``names``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr if _is_name(node.func.value, names) else None
    return None


def _opens(node: ast.AST, uows: frozenset[str]) -> bool:
    """``node`` is ``with``/``async with`` over a unit of work (among other items)."""
    if isinstance(node, ast.With | ast.AsyncWith):
        return any(_is_name(item.context_expr, uows) for item in node.items)
    return False


def clock_reads_outside_a_transaction(tree: ast.AST) -> list[int]:
    """Lines calling ``clock.now()`` that are not inside a transaction."""
    uows, clocks = _visible(tree, UNIT_OF_WORK), _visible(tree, CLOCK)
    bad: list[int] = []

    def visit(node: ast.AST, inside: bool) -> None:
        inside = inside or _opens(node, uows[id(node)])
        if not inside and _method_call(node, clocks[id(node)]) == "now":
            bad.append(getattr(node, "lineno", 0))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return bad


# A write that belongs to no tenant (a lease row, a purge of settled rows) says
# why in its docstring, on a line of its own beginning with this.
NO_TENANT_LOCK = "No tenant lock:"


def commits_without_tenant_lock(tree: ast.AST) -> list[str]:
    """Functions that open a transaction and commit it, but never lock the tenant
    (nor say in their docstring why they need not: ``NO_TENANT_LOCK``)."""
    uows = _visible(tree, UNIT_OF_WORK)
    bad = []
    for fn in ast.walk(tree):
        if not isinstance(fn, _Function):
            continue
        doc = ast.get_docstring(fn) or ""
        if any(line.strip().startswith(NO_TENANT_LOCK) for line in doc.splitlines()):
            continue
        own = uows[id(fn)]
        calls = {_method_call(node, own) for node in ast.walk(fn)}
        opens = any(_opens(node, own) for node in ast.walk(fn))
        if (
            opens
            and "commit" in calls
            and not calls & {"lock_tenant", "lock_attendees", "lock_part"}
        ):
            bad.append(fn.name)
    return bad


def _uses(nodes: list[ast.stmt], uows: frozenset[str]) -> bool:
    return any(_is_name(n, uows) for stmt in nodes for n in ast.walk(stmt))


def touch_after_commit(tree: ast.AST) -> list[int]:
    """Lines of ``uow.commit()`` calls after which the function touches the unit of work.

    What follows a commit, in its block and then in each enclosing block, until
    a return or raise ends the path.
    """
    uows = _visible(tree, UNIT_OF_WORK)
    parents: dict[int, tuple[list[ast.stmt], int, ast.AST]] = {}
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                for i, stmt in enumerate(block):
                    parents[id(stmt)] = (block, i, node)
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Expr) or _method_call(node.value, uows[id(node)]) != "commit":
            continue
        here: ast.AST = node
        while id(here) in parents and not isinstance(here, _Function):
            block, i, owner = parents[id(here)]
            rest = block[i + 1 :]
            ends = next(
                (k for k, s in enumerate(rest) if isinstance(s, ast.Return | ast.Raise)), None
            )
            if _uses(rest if ends is None else rest[: ends + 1], uows[id(node)]):
                bad.append(node.lineno)
                break
            if ends is not None or isinstance(owner, _Function):
                break
            here = owner
    return bad


def unseen_transactions(tree: ast.AST) -> list[int]:
    """Lines of ``with name:`` / ``async with name:`` whose name is no typed unit of work.

    The engine enters nothing by a bare name but its units of work, so one the
    rules do not see (its annotation lost, or a new spelling of the type) is
    a transaction they would silently skip.
    """
    uows = _visible(tree, UNIT_OF_WORK)
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.With | ast.AsyncWith)
        for item in node.items
        if isinstance(item.context_expr, ast.Name) and item.context_expr.id not in uows[id(node)]
    ]


def keyed_use_cases(sources: Sequence[str]) -> frozenset[str]:
    """Use cases (a unit of work among their parameters) whose ``audit_key`` is optional.

    Such a use case may append to the audit chain: a caller that leaves the key
    out writes plain entries while the server has a key (and its chain then
    fails verification).
    """
    found = set()
    for source in sources:
        for fn in ast.walk(ast.parse(source)):
            if isinstance(fn, _Function) and _declared(fn, UNIT_OF_WORK):
                params = fn.args
                positional = [*params.posonlyargs, *params.args]
                defaulted = positional[len(positional) - len(params.defaults) :]
                defaulted += [
                    a for a, d in zip(params.kwonlyargs, params.kw_defaults, strict=True) if d
                ]
                if "audit_key" in {a.arg for a in defaulted}:
                    found.add(fn.name)
    return frozenset(found)


def calls_without_audit_key(source: str, keyed: frozenset[str]) -> list[str]:
    """Calls of the ``keyed`` use cases in ``source`` that do not pass ``audit_key``."""
    missing = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            if _name_of(func) == "partial" and node.args:  # partial(f, ...) calls f later
                func = node.args[0]
            name = _name_of(func)
            if name in keyed and "audit_key" not in {k.arg for k in node.keywords}:
                missing.append(f"{name} (line {node.lineno})")
    return missing


def _name_of(func: ast.expr) -> str | None:
    return getattr(func, "id", getattr(func, "attr", None))
