"""The README and docs/ stand alone: no link leads out of the repository.

A newcomer reads them offline, and a link out rots. Addresses in examples are
loopback or the reserved example domains (RFC 2606); anything else is a link
out. (A webhooks section once linked the Standard Webhooks site.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
URL = re.compile(r"\b(?:https?|wss?|ftp)://(\[[^\]]*\]|[^/\s:)`'\"<>\]]+)", re.IGNORECASE)
# Loopback, unspecified and documentation hosts only.
EXAMPLE = re.compile(
    r"^(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\]|(?:[\w-]+\.)*example(?:\.(?:com|org|net))?"
    r"|(?:[\w-]+\.)*(?:test|invalid|localhost))$",
    re.IGNORECASE,
)


def links_out(text: str) -> list[str]:
    """The hosts of ``text``'s URLs that are not examples."""
    return [m.group(1) for m in URL.finditer(text) if not EXAMPLE.match(m.group(1))]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_document_links_out_of_the_repository(path: Path) -> None:
    assert links_out(path.read_text()) == [], path.name


def test_the_rule_sees_a_link_out_and_lets_examples_be() -> None:
    planted = "signed as [Standard Webhooks](https://www.standardwebhooks.com) prescribes"
    assert links_out(planted) == ["www.standardwebhooks.com"]
    examples = (
        "curl http://127.0.0.1:8080/v1/holds, https://hooks.example.com/in, "
        "http://localhost:9/x, https://calendar.example.org/dav/, http://[::1]:8080/"
    )
    assert links_out(examples) == []
