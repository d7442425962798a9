"""Plain-data codec for values that cross the sandbox boundary (standard library only).

This file runs in three places: on the host (decoding results), inside the sandbox's driver (decoding
results for `assert` tests, encoding arguments) and inside the program's own process (encoding what its
functions return). The sandbox sends it as source text, so it must not import anything from `sandbox`.

`encode(value)` turns plain Python data into a JSON-ready structure; `decode(structure)` rebuilds it:
None, bool, int, float (NaN and infinities too), str, bytes, complex, list, tuple, dict, set, frozenset,
and numpy scalars and arrays (as their `.tolist()`). Lists stay JSON arrays; every other container becomes
a JSON object `{"~": tag, "v": payload}`, so a JSON object never means a plain dict.

`validated(structure)` checks that a structure from an untrusted process is one `encode` could have made,
without rebuilding it: decoding hashes every dict key and set element, and a program that writes the answer
itself can choose thousands of integers with one hash (k * (2 ** 61 - 1)), which makes building the dict take
quadratic time. Values that only travel on (a call test's return value, judged on the host) are validated,
never decoded.

Subclasses are reduced to their base type through the base type's own methods (`int.__index__`,
`list.__iter__`, `dict.items`, ...), never through methods the program may override: an object whose
`__eq__` always returns True, or an int subclass that lies in `__str__`, crosses as its real value.

>>> decode(encode((1, [2.5, "x"], {3: None})))
(1, [2.5, 'x'], {3: None})
"""

MAX_DEPTH = 100
_CONTAINER_TAGS = ("tuple", "set", "frozenset", "dict", "bytes", "complex")
_HASHABLE_TAGS = ("tuple", "frozenset", "bytes", "complex")  # may be a dict key or a set element


class EncodeError(TypeError):
    """A value that is not plain data (or nests deeper than MAX_DEPTH levels, e.g. a cycle)."""


def encode(value, _depth=0):
    """Return a JSON-ready structure for plain data `value`; raises EncodeError for anything else."""
    if _depth > MAX_DEPTH:
        raise EncodeError("value nests deeper than %d levels (or contains itself)" % MAX_DEPTH)
    t = type(value)
    if value is None or t is bool or t is int or t is str or t is float:
        return value
    d = _depth + 1
    if issubclass(t, int):
        return int.__index__(value)
    if issubclass(t, float):
        return float.__float__(value)
    if issubclass(t, str):
        return str.__str__(value)
    if issubclass(t, (bytes, bytearray)):
        return {"~": "bytes", "v": memoryview(value).tobytes().hex()}
    if issubclass(t, complex):
        return {"~": "complex", "v": [complex.real.__get__(value), complex.imag.__get__(value)]}
    if issubclass(t, list):
        return [encode(x, d) for x in list.__iter__(value)]
    if issubclass(t, tuple):
        return {"~": "tuple", "v": [encode(x, d) for x in tuple.__iter__(value)]}
    if issubclass(t, dict):
        return {"~": "dict", "v": [[encode(k, d), encode(v, d)] for k, v in dict.items(value)]}
    if issubclass(t, frozenset):
        return {"~": "frozenset", "v": [encode(x, d) for x in frozenset.__iter__(value)]}
    if issubclass(t, set):
        return {"~": "set", "v": [encode(x, d) for x in set.__iter__(value)]}
    if getattr(t, "__module__", None) == "numpy" and hasattr(value, "tolist"):
        return encode(value.tolist(), d)
    raise EncodeError(
        "a value of type %s cannot leave the sandbox: only plain data (numbers, str, bytes, "
        "list, tuple, dict, set) can" % t.__name__
    )


def decode(data):
    """Rebuild the value `encode` described; raises ValueError for an unknown tag."""
    if isinstance(data, list):
        return [decode(x) for x in data]
    if not isinstance(data, dict):
        return data
    tag, v = data.get("~"), data.get("v")
    if tag == "tuple":
        return tuple(decode(x) for x in v)
    if tag == "dict":
        return {decode(k): decode(x) for k, x in v}
    if tag == "set":
        return {decode(x) for x in v}
    if tag == "frozenset":
        return frozenset(decode(x) for x in v)
    if tag == "bytes":
        return bytes.fromhex(v)
    if tag == "complex":
        return complex(v[0], v[1])
    raise ValueError("unknown value tag %r" % (tag,))


def validated(data):
    """Return `data` itself when it is a structure `encode` could have made (known tags, well-formed payloads,
    dict keys and set elements of hashable kinds, at most MAX_DEPTH levels); raises ValueError saying what is
    wrong otherwise. Time linear in the structure's size: it builds no dict or set and hashes no value."""
    _validate(data, 0, False)
    return data


def _validate(data, depth, key):
    """Check one node at `depth`; `key`: it must be of a hashable kind (a dict key or set element)."""
    if depth > MAX_DEPTH:
        raise ValueError("value nests deeper than %d levels" % MAX_DEPTH)
    if data is None or isinstance(data, (bool, int, float, str)):
        return
    if isinstance(data, list):
        if key:
            raise ValueError("a list cannot be a dict key or a set element")
        for x in data:
            _validate(x, depth + 1, False)
        return
    if not isinstance(data, dict) or len(data) != 2 or data.get("~") not in _CONTAINER_TAGS or "v" not in data:
        raise ValueError("not an encoded value: %.80r" % (data,))
    tag, v = data["~"], data["v"]
    if key and tag not in _HASHABLE_TAGS:
        raise ValueError("a %s cannot be a dict key or a set element" % tag)
    if tag == "bytes":
        if not isinstance(v, str):
            raise ValueError("bytes must be encoded as a hex string")
        bytes.fromhex(v)  # ValueError when it is not hex
        return
    if not isinstance(v, list):
        raise ValueError("the payload of a %s must be a list" % tag)
    if tag == "complex":
        if len(v) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            raise ValueError("a complex must be encoded as [real, imag]")
        return
    for x in v:
        if tag == "dict":
            if not (isinstance(x, list) and len(x) == 2):
                raise ValueError("a dict must be encoded as [key, value] pairs")
            _validate(x[0], depth + 1, True)
            _validate(x[1], depth + 1, False)
        else:
            _validate(x, depth + 1, tag != "tuple" or key)
