"""RFC 8785 canonical bytes of the JSON values hopchain writes itself (a carried-over chain).

Every other canonical text, hops and identities alike, is written by the core
(``hopchain._core``).
"""

from __future__ import annotations

import orjson

__all__ = ["jcs"]


def jcs(value: object) -> bytes:
    """RFC 8785 canonical bytes of a JSON value whose numbers are integers and keys ASCII.

    orjson's compact output with sorted keys is RFC 8785 for such values: strings are escaped
    alike, and ASCII keys sort alike by UTF-16 code units and by bytes.
    """
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
