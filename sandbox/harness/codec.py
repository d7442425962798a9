"""Plain-data codec for values that cross the sandbox boundary (standard library only).

This file runs in three places: on the host (decoding results), inside the sandbox's driver (decoding
results for `assert` tests, encoding arguments) and inside the program's own process (encoding what its
functions return). The sandbox sends it as source text, so it must not import anything from `sandbox`.

`encode(value)` turns plain Python data into a JSON-ready structure; `decode(structure)` rebuilds it:
None, bool, int, float (NaN and infinities too), str, bytes, complex, list, tuple, dict, set, frozenset,
and numpy scalars and arrays (as their `.tolist()`). Lists stay JSON arrays; every other container becomes
a JSON object `{"~": tag, "v": payload}`, so a JSON object never means a plain dict.

Subclasses are reduced to their base type through the base type's own methods (`int.__index__`,
`list.__iter__`, `dict.items`, ...), never through methods the program may override: an object whose
`__eq__` always returns True, or an int subclass that lies in `__str__`, crosses as its real value.

>>> decode(encode((1, [2.5, "x"], {3: None})))
(1, [2.5, 'x'], {3: None})
"""

MAX_DEPTH = 100


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
