"""The arrows of `docs/architecture.md`'s "Layers" block are the real imports: every
package-level import of `dispatcher/` is drawn, and no drawn arrow is missing from the
code (the imports are read from the source by `devkit.reference_docs.package_imports`).

An arrow line reads `SOURCE  ->  TARGET, TARGET, ...` (or `nothing`); a list ending in a
comma goes on to the next line; the words after two or more spaces, and the lines with no
arrow, describe the package.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devkit import reference_docs

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "docs" / "architecture.md"
ARROW = re.compile(r"^(\S+)\s+->\s+(.*)$")
NAME = re.compile(r"^[a-z_]+(/|\.py)$")


def _layers_block(markdown: str) -> list[str]:
    """The lines of the first fenced block under the `## Layers` heading."""
    section = markdown.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1].splitlines()


def drawn_arrows(block: list[str]) -> dict[str, set[str]]:
    """Source -> its targets, as the block draws them (names as written: `api/`,
    `clock.py`)."""
    arrows: dict[str, set[str]] = {}
    lines = iter(block)
    for line in lines:
        match = ARROW.match(line)
        if not match:
            continue
        source, listed = match.group(1), match.group(2).strip()
        while listed.endswith(","):
            listed += " " + next(lines).strip()
        listed = re.split(r"\s{2,}", listed)[0]
        targets = {name.strip() for name in listed.split(",")}
        assert source not in arrows, f"{source} is drawn twice"
        assert all(NAME.match(name) for name in {source} | targets - {"nothing"}), line
        arrows[source] = targets - {"nothing"}
    return arrows


def real_arrows() -> dict[str, set[str]]:
    name = reference_docs.package_name
    return {name(package): {name(target) for target in targets}
            for package, targets in reference_docs.package_imports().items()}


def test_the_parser_reads_wrapped_lists_and_descriptions() -> None:
    block = ["a/      ->  b.py, c/,", "            d/    what a is", "   more words",
             "b.py    ->  nothing"]
    assert drawn_arrows(block) == {"a/": {"b.py", "c/", "d/"}, "b.py": set()}


def test_every_package_has_its_line() -> None:
    drawn, real = drawn_arrows(_layers_block(ARCHITECTURE.read_text())), real_arrows()
    assert sorted(set(real) - set(drawn)) == [], "packages missing from the Layers block"
    assert sorted(set(drawn) - set(real)) == [], "the Layers block names no such package"


@pytest.mark.parametrize("package", sorted(real_arrows()))
def test_the_arrows_are_the_imports(package: str) -> None:
    drawn = drawn_arrows(_layers_block(ARCHITECTURE.read_text())).get(package, set())
    real = real_arrows()[package]
    assert sorted(real - drawn) == [], f"{package} imports these; the block does not say so"
    assert sorted(drawn - real) == [], f"the block says {package} imports these; it does not"
