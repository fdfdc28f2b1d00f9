"""Make data/tokens.bin, the token file chapter 03's `get_batch` reads through np.memmap.

The text is the source of a fixed list of CPython 3.11 standard-library modules (PSF License v2, which
allows redistribution), concatenated in the order below. Tokens are bytes: each UTF-8 byte is one
token id (0..255), stored as little-endian uint16 (so a real tokenizer's ids, up to 65535, would fit
the same format), exactly 2**20 tokens (2 MiB). Run it with the interpreter of the version named
below (`python3.11 data/make_tokens.py`); it refuses another version, whose library text differs,
and `--check` compares with the committed file instead of writing it.
"""
from __future__ import annotations

import hashlib
import sys
import sysconfig
from pathlib import Path

import numpy as np

VERSION = (3, 11)
MODULES = ("argparse.py", "inspect.py", "difflib.py", "dataclasses.py", "typing.py", "pathlib.py",
           "fractions.py", "textwrap.py", "statistics.py", "json/decoder.py", "json/encoder.py",
           "email/message.py", "http/client.py", "urllib/parse.py", "tarfile.py", "zipfile.py",
           "configparser.py", "logging/__init__.py", "subprocess.py", "functools.py")
TOKENS = 2**20
OUT = Path(__file__).resolve().with_name("tokens.bin")


def tokens() -> np.ndarray:
    if sys.version_info[:2] != VERSION:
        raise SystemExit(f"run this with Python {VERSION[0]}.{VERSION[1]}: other versions' library text differs")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = b"".join((stdlib / name).read_bytes() + b"\n\n" for name in MODULES)
    if len(text) < TOKENS:
        raise SystemExit(f"only {len(text)} bytes of text; {TOKENS} tokens are needed")
    return np.frombuffer(text[:TOKENS], dtype=np.uint8).astype("<u2")


def main() -> int:
    data = tokens().tobytes()
    if "--check" in sys.argv:
        same = OUT.read_bytes() == data
        print(f"{OUT.name} {'matches' if same else 'DIFFERS FROM'} what this script makes")
        return 0 if same else 1
    OUT.write_bytes(data)
    print(f"wrote {OUT} ({len(data)} bytes, {TOKENS} tokens, sha256 {hashlib.sha256(data).hexdigest()[:16]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
