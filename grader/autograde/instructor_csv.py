"""An instructor's CSV file (overrides, submission times): read as Excel and Canvas write them, or a one-line reason."""
from __future__ import annotations

import contextlib
import csv
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


@contextlib.contextmanager
def reading(path: Path) -> Iterator[TextIO]:
    """`path` open as UTF-8 text (a byte-order mark allowed); any failure to read it, there or while the body
    parses it, becomes a ValueError naming the file."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            yield f
    except OSError as e:
        raise ValueError(f"cannot read {path} ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    except csv.Error as e:
        raise ValueError(f"{path}: not a CSV file ({e})") from None
