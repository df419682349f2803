"""Frames built to exhaust a decoder (deep nesting, huge declared lengths...), shared by the wire
unit tests and the e2e frame security tests.
"""

from __future__ import annotations


_T_KEY = b"\xa1t"  # the str "t", so that each bomb sits inside an otherwise plausible map
BOMBS: dict[str, bytes] = {
    "bare nested array32 headers": b"\xdd\xff\xff\xff\xff" * 20,
    "nested array32 headers in a map": b"\x81" + _T_KEY + b"\xdd\xff\xff\xff\xff" * 20,
    "2000-deep nesting": b"\x81" + _T_KEY + b"\x91" * 2000 + b"\xc0",
    "2000-deep nested maps": b"\x81" + _T_KEY + b"\x81\xa1k" * 2000 + b"\xc0",
    "a map with 1M entries": b"\xdf" + (1_000_000).to_bytes(4, "big") + b"\xa1k\xc0" * 1_000_000,
    "an array of 1M empty maps": b"\x81" + _T_KEY + b"\xdd" + (1_000_000).to_bytes(4, "big") + b"\x80" * 1_000_000,
    "15 arrays of 10k empty maps": b"\x81" + _T_KEY + b"\x9f" + (b"\xdc\x27\x10" + b"\x80" * 10_000) * 15,
    "a map32 header promising 2^32-1 pairs": b"\x81" + _T_KEY + b"\xdf\xff\xff\xff\xff",
    "non-str map keys": b"\x81\x01\x02",
    "ext types": b"\x81" + _T_KEY + b"\xc9\xff\xff\xff\xff\x05",
}
