"""A ratchet for the parallel run: no test takes a fixed port or ends processes by name.

`make test` runs two workers side by side, and other runs may share the machine
(README, Tests). A server of a test listens on port 0 or on a port just found
free; a test ends only the processes it started, by their pid (never ``pkill``,
``killall``, or a signal to a whole process group it does not lead).
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent
_BY_NAME = re.compile(r"\b(pkill|killall)\b")
_LISTENERS = {"TCPSite", "TestServer", "run_app", "serve", "create_server", "start_server"}


def _fixed_port(node: ast.AST | list[ast.expr]) -> bool:
    """A port written as a number other than 0 (for a list: its last item)."""
    if isinstance(node, list):
        return bool(node) and _fixed_port(node[-1])
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value != 0


def _literal(node: ast.AST) -> bool:
    """A number written out (``0``, ``-1``), not a pid the test holds."""
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    return isinstance(node, ast.Constant)


def _port_argument(values: list[ast.expr]) -> bool:
    """``"--port", "8080"`` among the items of an argv."""
    return any(
        isinstance(flag, ast.Constant)
        and flag.value == "--port"
        and isinstance(value, ast.Constant)
        and str(value.value).strip("0") != ""
        for flag, value in itertools.pairwise(values)
    )


def unsafe_lines(source: str) -> list[int]:
    """Lines that listen on a fixed port or end processes that are not the test's own."""
    found = [n for n, line in enumerate(source.splitlines(), 1) if _BY_NAME.search(line)]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List | ast.Tuple) and _port_argument(node.elts):
            found.append(node.lineno)
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        name = node.func.id if isinstance(node.func, ast.Name) else name
        address = node.args[0] if node.args else None
        if name == "bind" and isinstance(address, ast.Tuple) and _fixed_port(address.elts[1:]):
            found.append(node.lineno)
        if name in _LISTENERS and any(
            k.arg == "port" and _fixed_port(k.value) for k in node.keywords
        ):
            found.append(node.lineno)
        if name in ("killpg", "kill") and node.args and _literal(node.args[0]):
            found.append(node.lineno)  # os.killpg(0, ...), os.kill(-1, ...): not a pid of its own
    return sorted(set(found))


def test_no_test_takes_a_fixed_port_or_ends_processes_by_name() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(ROOT.rglob("*.py"))
        if path.name != Path(__file__).name and (lines := unsafe_lines(path.read_text()))
    }
    assert not found, f"unsafe beside another test (README, Tests): {found}"


def test_the_ratchet_catches_each_kind_and_spares_port_zero() -> None:
    planted = (
        "import os, signal, socket, subprocess\n"
        "subprocess.run(['pkill', '-f', 'radicale'])\n"
        "argv = ['slotward', 'serve', '--port', '8080']\n"
        "socket.socket().bind(('127.0.0.1', 8080))\n"
        "web.TCPSite(runner, '127.0.0.1', port=8080)\n"
        "os.killpg(0, signal.SIGKILL)\n"
        "os.kill(-1, signal.SIGTERM)\n"
        "argv = ['slotward', 'serve', '--port', '0']\n"
        "argv = ['slotward', 'serve', '--port', str(port)]\n"
        "socket.socket().bind(('127.0.0.1', 0))\n"
        "web.TCPSite(runner, '127.0.0.1', port=0)\n"
        "os.killpg(proc.pid, signal.SIGKILL)\n"
    )
    assert unsafe_lines(planted) == [2, 3, 4, 5, 6, 7]
