"""The core's indented JSON writer (``_core.json_dumps_indented``, used by ``dumps_report``): the
same bytes as ``json.dumps(obj, indent=n)`` on every tree json writes, and ``json.dumps``'s own
answer (text or exception) on every tree it does not take."""

from __future__ import annotations

import collections
import enum
import json
import math
import random
import struct
import sys

import pytest

from gpuprof import _core
from gpuprof.report.renderers import dumps_compact, dumps_indented, dumps_report

write = _core.json_dumps_indented
compact = _core.json_dumps_compact


def same(obj, indent=2):
    assert write(obj, indent) == json.dumps(obj, indent=indent)
    assert compact(obj) == json.dumps(obj, separators=(",", ":"))


@pytest.mark.parametrize(
    "x",
    [
        0.0,
        -0.0,
        1.0,
        0.1,
        1e16,
        1e15,
        1e-5,
        1e-4,
        123456789.125,
        5e-324,
        2.2250738585072014e-308,
        sys.float_info.max,
        -1.5e300,
        1 / 3,
    ],
)
def test_floats_as_float_repr(x):
    # float.__repr__: shortest round trip, '.0' added to integral values, exponent past 1e16 / below 1e-4.
    assert write([x], 0) == "[\n" + repr(x) + "\n]"
    same({"x": x, "l": [x, -x]})


def test_floats_over_random_bit_patterns_as_float_repr():
    # The writer formats floats from std::to_chars's shortest digits: every finite double of 200,000
    # drawn bit patterns, and 100,000 values of the kinds reports hold, as float.__repr__ writes it.
    rng = random.Random(20261129)
    drawn = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(200_000)]
    drawn += [round(rng.uniform(0, 10 ** rng.randrange(1, 9)), rng.randrange(7)) for _ in range(100_000)]
    finite = [x for x in drawn if math.isfinite(x)]
    assert compact(finite) == "[" + ",".join(map(repr, finite)) + "]"


def test_nan_and_infinities_as_json_writes_them():
    assert write([math.nan, math.inf, -math.inf], 1) == "[\n NaN,\n Infinity,\n -Infinity\n]"
    same({"a": [math.nan, math.inf, -math.inf]})


def test_ints_bools_none_and_int_subclasses():
    class Level(enum.IntEnum):
        HIGH = 3

    huge = 10**40
    tree = [0, -1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, huge, -huge, True, False, None, Level.HIGH]
    text = write(tree, 2)
    assert text == json.dumps(tree, indent=2)
    # int.__repr__ for the IntEnum member (not "Level.HIGH"); bool before int.
    assert "\n  3\n" in text and "true" in text and "10000000000000000000000000000000000000000" in text


def test_strings_escaped_as_encode_basestring_ascii():
    s = 'a"b\\c/\b\f\n\r\t\x00\x1f\x7f\x80é€\U0001f600\ud800\udfff~ '
    expected = (
        '"a\\"b\\\\c/\\b\\f\\n\\r\\t\\u0000\\u001f\\u007f\\u0080\\u00e9\\u20ac\\ud83d\\ude00\\ud800\\udfff~ "'
    )
    assert write(s, 2) == expected == json.dumps(s, indent=2)
    same({s: [s, s[::-1]]})


def test_keys_converted_as_json_converts_them():
    d = {7: "i", -2.5: "f", math.nan: "n", -math.inf: "m", True: "t", None: "z", "s": 1, 10**30: "h"}
    d[False] = "f2"
    d[1] = "one"  # equal to True: the dict keeps the key True, json writes "true"
    text = write(d, 2)
    assert text == json.dumps(d, indent=2)
    for part in ('"7": "i"', '"-2.5": "f"', '"NaN": "n"', '"-Infinity": "m"', '"true": "one"', '"null": "z"'):
        assert part in text
    assert '"1000000000000000000000000000000": "h"' in text and '"false": "f2"' in text


def test_empty_containers_tuples_and_indents():
    tree = {"e": {}, "l": [], "t": (), "n": [[], {}, ((1, 2),)], "": ""}
    for indent in (0, 1, 2, 4, -3):
        same(tree, indent)
    assert write({}, 2) == "{}" and write([], 2) == "[]" and write((), 2) == "[]"


def test_scalars_at_the_top():
    for x in ("x\u2028", 5, 2.5, None, True, math.nan):
        same(x)


def test_container_subclasses_written_in_their_own_order():
    od = collections.OrderedDict([("b", 1), ("a", 2)])
    od.move_to_end("b")
    Point = collections.namedtuple("Point", "x y")

    class Rows(list):
        pass

    tree = {"od": od, "p": Point(1.5, [2]), "rows": Rows([1, {"k": Point(0, 0)}]), "empty": Rows()}
    same(tree)
    assert write(od, 2).index('"a"') < write(od, 2).index('"b"')


def test_a_list_subclass_iterated_through_its_own_iter():
    # json iterates a list subclass through its __iter__, indented or compact (its C encoder makes a
    # list of it first); the writer does the same.
    class Reversed(list):
        def __iter__(self):
            return iter(list.__iter__(self).__reduce__()[1][0][::-1])

    r = Reversed([1, 2, 3])
    assert write(r, 0) == json.dumps(r, indent=0) == "[\n3,\n2,\n1\n]"
    assert compact(r) == json.dumps(r, separators=(",", ":")) == "[3,2,1]"


@pytest.mark.parametrize(
    "tree, error, match",
    [
        ({"when": object()}, TypeError, "Object of type object is not JSON serializable"),
        ({(1, 2): 3}, TypeError, "keys must be str, int, float, bool or None, not tuple"),
        ([b"bytes"], TypeError, "bytes"),
        ([{1, 2}], TypeError, "set"),
    ],
)
def test_other_types_raise_and_dumps_indented_gives_json_dumps_answer(tree, error, match):
    with pytest.raises(error, match=match):
        write(tree, 2)
    with pytest.raises(error, match=match):
        compact(tree)
    with pytest.raises(error):
        dumps_indented(tree, 2)
    with pytest.raises(error):
        dumps_compact(tree)
    # What json.dumps writes with a default, the writer leaves to it: the same text comes back.
    assert dumps_indented({"when": 1.5}, 2) == json.dumps({"when": 1.5}, indent=2)


def test_cycles_and_deep_nesting_fall_back_to_json_dumps():
    loop: list = [1]
    loop.append({"again": loop})
    with pytest.raises(ValueError, match="Circular reference detected"):
        write(loop, 2)
    with pytest.raises(ValueError, match="Circular reference detected"):
        dumps_indented(loop, 2)
    # The same list twice, side by side, is no cycle.
    shared = [1, 2]
    same({"a": shared, "b": shared})
    # Deeper than the writer goes, shallower than Python's recursion limit: json.dumps writes it.
    deep: list = []
    for _ in range(600):
        deep = [deep]
    with pytest.raises(ValueError, match="nested deeper than 512"):
        write(deep, 1)
    with pytest.raises(ValueError, match="nested deeper than 512"):
        compact(deep)
    assert dumps_indented(deep, 1) == json.dumps(deep, indent=1)
    assert dumps_compact(deep) == json.dumps(deep, separators=(",", ":"))
    below: list = []
    for _ in range(511):
        below = [below]
    same(below, 1)


def test_dumps_report_keeps_step_views_compact_and_last():
    data = {"b": [1.5, {"x": None}], "step_views": [{"s": [1, 2]}], "a": "é"}
    text = dumps_report(data, indent=2)
    rest = json.dumps({"b": data["b"], "a": "é"}, indent=2)
    assert text == rest[:-2] + ',\n  "step_views": [{"s":[1,2]}]\n}'
    assert json.loads(text) == data
    assert dumps_report({"step_views": []}) == '{"step_views": []}'
    assert dumps_report(data, indent=None) == json.dumps(data)


def test_stored_traces_reports_equal_json_dumps(shared_traces):
    import gpuprof

    paths = sorted(shared_traces.rglob("*.json.gz"))
    assert len(paths) >= 3, f"fewer stored traces than expected under {shared_traces}"
    for path in paths:
        data = gpuprof.analyze(path).to_dict()
        rest = {k: v for k, v in data.items() if k != "step_views"}
        assert write(rest, 2) == json.dumps(rest, indent=2), path
        assert compact(data) == json.dumps(data, separators=(",", ":")), path
        assert dumps_report(data) == _reference_dumps_report(data), path


def _reference_dumps_report(data):
    rest = {k: v for k, v in data.items() if k != "step_views"}
    if "step_views" not in data:
        return json.dumps(data, indent=2)
    views = json.dumps(data["step_views"], separators=(",", ":"))
    return json.dumps(rest, indent=2)[:-2] + ',\n  "step_views": ' + views + "\n}"


def test_a_core_without_the_writer_writes_through_json_dumps(monkeypatch):
    # A checkout whose native pieces predate the writer: the same text, from json.dumps.
    data = {"b": [1.5, math.nan, {"é": None}], "step_views": [{"s": (1, 2)}]}
    expected = dumps_report(data)
    monkeypatch.delattr(_core, "json_dumps_indented")
    monkeypatch.delattr(_core, "json_dumps_compact")
    assert dumps_report(data) == expected
    assert dumps_compact(data) == json.dumps(data, separators=(",", ":"))
