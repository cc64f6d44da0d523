"""The core's indented JSON writer against ``json.dumps(obj, indent=n)`` on random trees: floats
(NaN, infinities, -0.0, subnormals, the repr's exponent edges), ints past 64 bits, bools, None,
every code point (astral ones, lone surrogates, control characters), empty containers, tuples and
the non-str keys json converts."""

from __future__ import annotations

import json
import math

import pytest

from gpuprof import _core

hypothesis = pytest.importorskip("hypothesis", reason="pip install hypothesis")
st = hypothesis.strategies
write = _core.json_dumps_indented

_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e16, 1e-5, 5e-324, 1e22, 9007199254740993.0, math.nan, -math.inf]),
)
_ints = st.one_of(st.integers(), st.integers(min_value=-(10**60), max_value=10**60))
# Any code point (surrogates included), and often the ones escaping treats apart.
_chars = st.one_of(
    st.characters(exclude_categories=()),
    st.sampled_from(
        '\ud800\udbff\udc00\udfff\x00\x08\x1f "\\/~\x7f\x80\u2028\uffff\U00010000\U0001f600\U0010ffff'
    ),
)
_text = st.text(alphabet=_chars, max_size=12)
_scalars = st.one_of(st.none(), st.booleans(), _ints, _floats, _text)
_keys = st.one_of(_text, st.integers(), st.floats(), st.booleans(), st.none())
_trees = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(_keys, inner, max_size=5),
    ),
    max_leaves=40,
)


@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(tree=_trees, indent=st.integers(min_value=0, max_value=5))
def test_random_trees_byte_identical_to_json_dumps_indented_and_compact(tree, indent):
    assert write(tree, indent) == json.dumps(tree, indent=indent)
    assert _core.json_dumps_compact(tree) == json.dumps(tree, separators=(",", ":"))
