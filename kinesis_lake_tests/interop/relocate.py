"""Relocate Java packages inside jars, as Maven's shade plugin does, in plain Python.

The Iceberg Spark runtime jar that PyPI carries (in ``snowpark-connect-deps-iceberg``)
lacks the Jackson classes Iceberg relocates to ``org.apache.iceberg.shaded``; Spark 3.5
ships Jackson unrelocated. Renaming a package inside class files only means rewriting
the UTF-8 entries of each class's constant pool (class names, descriptors, signatures and
string literals all live there), so the classes Iceberg looks for can be made from the
ones Spark has, without Maven.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

# Constant pool tags and the bytes their entries take after the tag (Utf8 is variable).
_FIXED_SIZES = {
    3: 4,
    4: 4,
    5: 8,
    6: 8,
    7: 2,
    8: 2,
    9: 4,
    10: 4,
    11: 4,
    12: 4,
    15: 3,
    16: 2,
    17: 4,
    18: 4,
    19: 2,
    20: 2,
}
_UTF8 = 1
_WIDE = (5, 6)  # long and double take two constant pool slots


def relocate_class(data: bytes, renames: list[tuple[bytes, bytes]]) -> bytes:
    """``data`` (a class file) with every constant-pool string prefix renamed."""
    (count,) = struct.unpack_from(">H", data, 8)
    out = bytearray(data[:10])
    position, index = 10, 1
    while index < count:
        tag = data[position]
        if tag == _UTF8:
            (length,) = struct.unpack_from(">H", data, position + 1)
            text = data[position + 3 : position + 3 + length]
            for old, new in renames:
                text = text.replace(old, new)
            out += bytes([_UTF8]) + struct.pack(">H", len(text)) + text
            position += 3 + length
        else:
            size = _FIXED_SIZES[tag]
            out += data[position : position + 1 + size]
            position += 1 + size
        index += 2 if tag in _WIDE else 1
    out += data[position:]
    return bytes(out)


def relocate_jars(jars: list[Path], package: str, into: str, target: Path) -> None:
    """Write ``target``: the classes (and service files) of ``jars`` under ``package``,
    moved to ``into`` + ``package`` with every reference to them renamed."""
    slashed, dotted = package.replace(".", "/"), package
    renames = [
        (slashed.encode(), f"{into.replace('.', '/')}/{slashed}".encode()),
        (dotted.encode(), f"{into}.{dotted}".encode()),
    ]
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        seen: set[str] = set()
        for jar in jars:
            with zipfile.ZipFile(jar) as source:
                for name in source.namelist():
                    if name.endswith("/") or name in seen:
                        continue
                    data = source.read(name)
                    if name.endswith(".class") and name.startswith(slashed):
                        moved = f"{into.replace('.', '/')}/{name}"
                        out.writestr(moved, relocate_class(data, renames))
                    elif name.startswith("META-INF/services/" + dotted):
                        moved = "META-INF/services/" + name.split("/")[-1].replace(
                            dotted, f"{into}.{dotted}", 1
                        )
                        out.writestr(moved, data.replace(dotted.encode(), renames[1][1]))
                    else:
                        continue
                    seen.add(name)
