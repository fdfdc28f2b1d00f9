"""Which students' code for an exercise is similar: winnowed fingerprints (MOSS's method) with copydetect.

copydetect tokenizes Python with Pygments and replaces every name by one letter and drops comments, so renamed
variables and rewritten comments change nothing; k-grams of those tokens are hashed, so functions moved around
a cell still match piece by piece. Every k-gram is kept (a winnowing window of 1): copydetect hashes with
Python's salted `hash`, and a wider window would pick different fingerprints in every process, so a re-run
would report different figures. The release's own code is boilerplate: its fingerprints are taken out of
every student's before any comparison, so an untouched scaffold has nothing left to match.

A pair is reported when the code they share is at least MIN_SHARED tokens long and covers at least
THRESHOLD of either student's own code. It says "similar", never "copied": the instructor reads the lines.
"""
from __future__ import annotations

import io
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import get_token_coverage

NOISE = 25          # copydetect's default noise threshold: shorter shared runs of tokens are not counted
THRESHOLD = 0.6     # the share of a student's own code that must be shared to report the pair
MIN_SHARED = 80      # tokens (after names became one letter); a short idiom written alike by many is not enough


@dataclass(frozen=True)
class Fingerprint:
    """One student's code for one exercise, fingerprinted, the release's fingerprints taken out."""
    student: str
    code: str
    print: CodeFingerprint

    @property
    def size(self) -> int:
        """The tokens of the student's own code (what is left after the boilerplate)."""
        return int(self.print.token_coverage)


@dataclass(frozen=True)
class SimilarPair:
    """Two students whose code for an exercise shares enough to be read side by side."""
    exercise: str
    a: str
    b: str
    similarity: float           # the larger of the two shares below
    share_a: float              # of a's own code, the part also in b's
    share_b: float
    shared_tokens: int
    lines_a: tuple[tuple[int, int], ...]   # 1-based inclusive line ranges of a's code that match
    lines_b: tuple[tuple[int, int], ...]
    code_a: str
    code_b: str


def fingerprint(student: str, code: str, boilerplate: set[int], k: int = NOISE) -> Fingerprint:
    """The student's code fingerprinted, every k-gram kept, the boilerplate's removed."""
    fp = CodeFingerprint("code.py", k, 1, fp=io.StringIO(code))
    fp.hashes = set(fp.hashes) - boilerplate
    fp.hash_idx = {h: i for h, i in fp.hash_idx.items() if h not in boilerplate}
    fp.token_coverage = get_token_coverage(fp.hash_idx, k, len(fp.filtered_code))
    return Fingerprint(student, code, fp)


def boilerplate(code: str, k: int = NOISE) -> set[int]:
    """The fingerprints of the release's code."""
    return set(CodeFingerprint("release.py", k, 1, fp=io.StringIO(code)).hashes) if code.strip() else set()


def _lines(code: str, slices: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Character slices of `code` as merged 1-based line ranges."""
    if slices.size == 0:
        return ()
    starts = np.cumsum([0] + [len(line) + 1 for line in code.split("\n")])
    ranges: list[tuple[int, int]] = []
    for begin, end in zip(slices[0].tolist(), slices[1].tolist()):
        first = int(np.searchsorted(starts, begin, side="right"))
        last = int(np.searchsorted(starts, max(begin, end - 1), side="right"))
        if ranges and first <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], last))
        else:
            ranges.append((first, last))
    return tuple(ranges)


def compare(exercise: str, x: Fingerprint, y: Fingerprint, threshold: float = THRESHOLD,
            min_shared: int = MIN_SHARED) -> SimilarPair | None:
    """The pair when it is similar enough to report, else None."""
    shared = x.print.hashes & y.print.hashes
    if not shared:
        return None
    # A safe bound first: each position of a shared k-gram covers at most k tokens of the code it is in.
    k = x.print.k
    px = k * sum(len(x.print.hash_idx[h]) for h in shared)
    py = k * sum(len(y.print.hash_idx[h]) for h in shared)
    if min(px, py) < min_shared or max(px / max(1, x.size), py / max(1, y.size)) < threshold:
        return None
    tokens_x, (share_x, share_y), (slices_x, slices_y) = compare_files(x.print, y.print)
    share_x, share_y = min(1.0, float(share_x)), min(1.0, float(share_y))
    tokens = min(int(tokens_x), round(share_y * y.size))  # the same run counted in each, the smaller
    if tokens < min_shared or max(share_x, share_y) < threshold:
        return None
    a, b = (x, y) if x.student <= y.student else (y, x)
    sa, sb = (share_x, share_y) if a is x else (share_y, share_x)
    la, lb = (slices_x, slices_y) if a is x else (slices_y, slices_x)
    return SimilarPair(exercise, a.student, b.student, round(max(sa, sb), 3), round(sa, 3), round(sb, 3),
                       int(tokens), _lines(a.code, la), _lines(b.code, lb), a.code, b.code)


def similar_pairs(exercise: str, codes: dict[str, str], release: str, threshold: float = THRESHOLD,
                  min_shared: int = MIN_SHARED) -> tuple[list[SimilarPair], int]:
    """Every reported pair for one exercise (most similar first), and how many students wrote code of their own."""
    bp = boilerplate(release)
    prints = [fingerprint(s, code, bp) for s, code in sorted(codes.items()) if code.strip()]
    own = [p for p in prints if p.size > 0]
    pairs = [pair for x, y in itertools.combinations(own, 2)
             if (pair := compare(exercise, x, y, threshold, min_shared)) is not None]
    pairs.sort(key=lambda p: (-p.similarity, -p.shared_tokens, p.a, p.b))
    return pairs, len(own)


def flagged(pairs: Sequence[SimilarPair]) -> set[tuple[str, str, str]]:
    """(exercise, a, b) of each pair: what a test compares."""
    return {(p.exercise, p.a, p.b) for p in pairs}
