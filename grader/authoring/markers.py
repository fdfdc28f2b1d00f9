"""Pure text transforms of one cell's source: solution and hidden-test blocks out, stubs in.

A marker is a whole line apart from indentation and trailing spaces. Solution blocks become
`raise NotImplementedError` (code) or `YOUR ANSWER HERE` (markdown) at the BEGIN line's
indentation; hidden-test blocks vanish with their markers.
"""
from __future__ import annotations

from dataclasses import dataclass

CODE_STUB = "raise NotImplementedError"
MARKDOWN_STUB = "YOUR ANSWER HERE"

# Substrings that must never reach a student file; a hit after generation means a bug or a typo.
FORBIDDEN = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN", "END HIDDEN")


class MarkerError(ValueError):
    """Unbalanced or leftover markers: generation stops rather than leak or mangle a solution."""


@dataclass(frozen=True)
class Block:
    """One kind of block: its BEGIN and END lines and what replaces it (None: nothing)."""

    begin: str
    end: str
    stub: str | None


CODE_BLOCKS = (
    Block("### BEGIN SOLUTION", "### END SOLUTION", CODE_STUB),
    Block("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS", None),
)
MARKDOWN_BLOCKS = (Block("<!-- BEGIN SOLUTION -->", "<!-- END SOLUTION -->", MARKDOWN_STUB),)


def strip_code(source: str, where: str = "cell") -> str:
    """Student version of a code cell; `where` names the cell in error messages."""
    return strip_blocks(source, CODE_BLOCKS, where)


def strip_markdown(source: str, where: str = "cell") -> str:
    """Student version of a markdown cell; `where` names the cell in error messages."""
    return strip_blocks(source, MARKDOWN_BLOCKS, where)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def strip_blocks(source: str, blocks: tuple[Block, ...], where: str = "cell") -> str:
    """Replace every block of `blocks` in `source`; raise MarkerError on unbalanced markers.

    Splitting on "\\n" and joining back keeps the cell's trailing newline (or its absence).
    """
    begins = {b.begin: b for b in blocks}
    ends = {b.end: b for b in blocks}
    out: list[str] = []
    open_block: Block | None = None
    open_line = 0
    open_indent = ""
    for number, line in enumerate(source.split("\n"), start=1):
        text = line.strip()
        if text in begins:
            if open_block is not None:
                raise MarkerError(f"{where}, line {number}: {text!r} inside the block "
                                  f"{open_block.begin!r} opened at line {open_line}")
            open_block, open_line, open_indent = begins[text], number, _indent(line)
        elif text in ends:
            if open_block is None:
                raise MarkerError(f"{where}, line {number}: {text!r} without a matching BEGIN")
            if ends[text] is not open_block:
                raise MarkerError(f"{where}, line {number}: {text!r} closes "
                                  f"{open_block.begin!r} opened at line {open_line}")
            if open_block.stub is not None:
                out.append(open_indent + open_block.stub + ("\r" if line.endswith("\r") else ""))
            open_block = None
        elif open_block is None:
            out.append(line)
    if open_block is not None:
        raise MarkerError(f"{where}, line {open_line}: {open_block.begin!r} is never closed "
                          f"(expected {open_block.end!r})")
    return "\n".join(out)


def find_forbidden(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line that still holds marker text, to refuse to publish it."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)
            if any(m in line for m in FORBIDDEN)]
