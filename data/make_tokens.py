"""Make data/tokens.bin, the token file chapter 03's `get_batch` reads through np.memmap.

Text: the source of 17 modules of the CPython 3.11.7 standard library (PSF License v2, which allows
redistribution), each followed by two newlines, concatenated in the order of SOURCES below and cut at
2**20 bytes (the cut falls inside configparser.py).

Tokens: bytes. Each UTF-8 byte of the text is one token id (0..255), stored as a little-endian uint16,
the format real token files use for vocabularies of up to 65,536 ids. 2**20 tokens, 2 MiB.

Reproduce: `python3.11 data/make_tokens.py` with CPython 3.11.7, or any Python >= 3.8 with
`--stdlib DIR` pointing at a CPython 3.11.7 `Lib/` folder. It needs nothing outside the standard
library. It checks the SHA-256 of every source file before using it, and of the file it makes, so
another Python's library (whose text differs even between 3.11 patch releases) stops it instead of
making a different file. `--check` compares with the committed file instead of writing it.
"""
from __future__ import annotations

import argparse
import array
import hashlib
import sys
import sysconfig
from pathlib import Path

# Standard-library file (relative to Lib/) -> SHA-256 of its CPython 3.11.7 text.
SOURCES = {
    "argparse.py": "dc1eba8adfdf615986421f981337458ba1072d3e718a0f76e3224940fd74118b",
    "inspect.py": "d55ac82f84e5c93953e9f5852ec255957e6c12f47d5cc0ea456447319da0f5af",
    "difflib.py": "0c6afc23568d55b3e9ac914f9c5361e3033e778aa5b58d3cc82835fc5c638679",
    "dataclasses.py": "4b7e1c99ebea53b546317d218a0261895a1769f83a6b95dc0136f13578066a7f",
    "typing.py": "115d96e966bf35cf97126f98dd1fa854a00dd832733fc01ede58cfd4fa490660",
    "pathlib.py": "3b21ac188fd9ac20bacc8ccd976fabd5d8ccf5000f8e157d3dfff005b228fb3d",
    "fractions.py": "b11e850e354808b882d13a70a911c29accd1dbdd41757566704e3b7206c74edb",
    "textwrap.py": "62867e40cdea6669b361f72af4d7daf0359f207c92cbeddfc7c7506397c1f31c",
    "statistics.py": "889a066f1b8063e73387ceb84018efc507a89b365b56c6afb9cc15b2ed25c2d9",
    "json/decoder.py": "9f02654649816145bc76f8c210a5fe3ba1de142d4d97a1c93105732e747c285b",
    "json/encoder.py": "7c358788fbb2a6a07f66f1f8446c52396f35fc201108f666d5be002d86f31af2",
    "email/message.py": "58d34f90058df562ca873c0097998ffb60ed5fe596e7e8138b5c450094d0d6c7",
    "http/client.py": "5ebb56a7864c690da18594115857e75b7d5cd50e8e934434ebe48e8d5f7377af",
    "urllib/parse.py": "0e67e2f5a301d0b573698e75a4e2d37c843b48cfe0e29fef894eda90d2189c27",
    "tarfile.py": "d6957647c11b6592e58e37d4e9f02f6cf9ee695cb0653b1072b542b8afac700d",
    "zipfile.py": "2de79ca464499be92e607a59552b4cb9cf8a9f6e000622b3673a98471c976a57",
    "configparser.py": "4a70cecccb55031a413b79e6ced2e63ca031f770cd25a4882980ecdeab67f6ff",
}
TOKENS = 2**20
OUTPUT_SHA256 = "951be8b368a58470adf1155111a242038bb18e3de0060cd301d0a0f883bf281c"
OUT = Path(__file__).resolve().with_name("tokens.bin")


def text(stdlib: Path) -> bytes:
    """The source text, each file checked against its CPython 3.11.7 hash."""
    parts = []
    for name, digest in SOURCES.items():
        path = stdlib / name
        if not path.is_file():
            raise SystemExit(f"{path} is missing: point --stdlib at a CPython 3.11.7 Lib/ folder")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise SystemExit(f"{path} is not CPython 3.11.7's {name} (its SHA-256 differs): run this with "
                             "Python 3.11.7, or point --stdlib at a CPython 3.11.7 Lib/ folder")
        parts.append(data + b"\n\n")
    return b"".join(parts)


def tokens(stdlib: Path) -> bytes:
    """The token file's bytes: one little-endian uint16 per byte of text, 2**20 of them."""
    ids = array.array("H", iter(text(stdlib)[:TOKENS]))  # each byte becomes one unsigned 16-bit id
    if ids.itemsize != 2 or len(ids) != TOKENS:
        raise SystemExit(f"expected {TOKENS} ids of 2 bytes, got {len(ids)} of {ids.itemsize}")
    if sys.byteorder == "big":
        ids.byteswap()
    data = ids.tobytes()
    if hashlib.sha256(data).hexdigest() != OUTPUT_SHA256:
        raise SystemExit("the tokens differ from the committed file's (its SHA-256 is in this script)")
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stdlib", type=Path, default=Path(sysconfig.get_paths()["stdlib"]),
                        help="the Lib/ folder to read (default: this interpreter's standard library)")
    parser.add_argument("--check", action="store_true", help="compare with data/tokens.bin instead of writing it")
    args = parser.parse_args()
    data = tokens(args.stdlib)
    if args.check:
        same = OUT.is_file() and OUT.read_bytes() == data
        print(f"{OUT.name} {'matches' if same else 'DIFFERS FROM'} what this script makes")
        return 0 if same else 1
    OUT.write_bytes(data)
    print(f"wrote {OUT} ({len(data)} bytes, {TOKENS} tokens, sha256 {OUTPUT_SHA256[:16]}...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
