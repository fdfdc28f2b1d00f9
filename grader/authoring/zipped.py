"""The one way the course writes a zip (the student release, Gradescope's autograder, the demo's zip
submission): entries sorted by name, all dated alike, fixed modes, so the same files give the same bytes."""
from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Collection, Mapping
from pathlib import Path

ZIP_EPOCH = 315532800  # 1980-01-01, the earliest date a zip entry can hold
COURSE_DATE = (2026, 1, 1, 0, 0, 0)  # the date of zips that have no date of their own (autograder, demo)


def zip_date(epoch: int) -> tuple[int, int, int, int, int, int]:
    """A zip entry's date for `epoch` (seconds since 1970, UTC), no earlier than a zip can hold."""
    return time.gmtime(max(epoch, ZIP_EPOCH))[:6]


def zip_bytes(members: Mapping[str, bytes], date_time: tuple[int, ...] = COURSE_DATE,
              executable: Collection[str] = ()) -> bytes:
    """A deflated zip of `members` (name -> bytes), sorted by name, each dated `date_time`; mode 755 for the
    names in `executable`, 644 for the rest."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in sorted(members.items()):
            info = zipfile.ZipInfo(name, date_time=date_time)
            info.external_attr = (0o755 if name in executable else 0o644) << 16
            z.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def write_zip(target: Path, members: Mapping[str, bytes], date_time: tuple[int, ...] = COURSE_DATE,
              executable: Collection[str] = ()) -> Path:
    """`zip_bytes` written to `target` through a temporary file beside it, so no half-written zip is left."""
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(zip_bytes(members, date_time, executable))
    tmp.replace(target)
    return target
