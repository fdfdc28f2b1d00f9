"""Group a check's failure messages into patterns, so the class report shows the class's common mistakes.

Two students who made the same mistake on different inputs read different messages ("got (3, 2)" and "got
(5, 4)"); masking what differs between them (numbers, quoted text, the student's own lines of code) leaves the
mistake, and counting the masked messages ranks the mistakes.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

# Where an error points into the student's code: "(in helper, line 3: x = y[0] | in f, line 9)". Their own
# names and lines differ from student to student; the error before it is the pattern.
_WHERE = re.compile(r"\((?:in [^()|]+?, line \d+[^|]*?)(?:\s*\|\s*in [^()|]+?, line \d+[^|]*?)*\)")
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"|`[^`\n]*`")
_NUMBER = re.compile(r"(?<![A-Za-z_0-9])[-+]?(?:0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
_SPACES = re.compile(r"\s+")

NUMBER_MASK = "#"
NAME_MASK = "…"
TOP = 5  # the groups a check's entry lists


def mask(message: str) -> str:
    """The message with its numbers, quoted names and pointers into the student's code masked."""
    text = _WHERE.sub(f"(in {NAME_MASK})", message)
    text = _QUOTED.sub(f"'{NAME_MASK}'", text)
    text = _NUMBER.sub(NUMBER_MASK, text)
    return _SPACES.sub(" ", text).strip()


@dataclass(frozen=True)
class FailureGroup:
    """Messages that read the same once masked: the pattern, how many, and one of them as it was."""
    pattern: str
    count: int
    example: str

    def to_dict(self) -> dict:
        return {"pattern": self.pattern, "count": self.count, "example": self.example}


def common_failures(messages: Iterable[str], top: int = TOP) -> list[FailureGroup]:
    """The `top` largest groups of `messages` after masking, largest first (ties by pattern); each example is
    the first message of its group in the order given, so the same input order gives the same page."""
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    for message in messages:
        pattern = mask(message)
        counts[pattern] += 1
        first.setdefault(pattern, message)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [FailureGroup(pattern, count, first[pattern]) for pattern, count in ranked[:top]]
