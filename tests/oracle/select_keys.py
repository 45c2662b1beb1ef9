"""Independent values of chatshards' selection and repeat keys (src/curate/select.rs).

Each key is xxh3-64 with the pipeline's seed over length-prefixed fields: a string is its byte
length (8 bytes little-endian) then its bytes; a row index is 8 bytes little-endian, a copy
number 4 bytes little-endian.

    python3 tests/oracle/select_keys.py   # needs `pip install xxhash`
"""

import struct

import xxhash


def field(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def sel_key(seed: int, source: str, file: str, row: int) -> int:
    data = field(b"select") + field(source.encode()) + field(file.encode()) + struct.pack("<Q", row)
    return xxhash.xxh3_64_intdigest(data, seed)


def repeat_key(seed: int, copy: int, sample_id: str) -> int:
    data = field(b"repeat") + struct.pack("<I", copy) + field(sample_id.encode())
    return xxhash.xxh3_64_intdigest(data, seed)


if __name__ == "__main__":
    print("SEL_GOLDEN", sel_key(0, "src", "a.jsonl", 7))
    print("REPEAT_GOLDEN", repeat_key(42, 2, "src:a.jsonl:7:0"))
