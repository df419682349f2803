"""The span-tracking JSON scanner: spans, values, dialects, errors, and splice = identity."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.ctl.wrap.jsonspan import MAX_NESTING_DEPTH, STRICT, Dialect, parse
from lazyd.ctl.wrap.spans import Array, Node, Object, Scalar, Splice, splice, to_python, walk
from lazyd.errors import JsonSyntaxError

JSONC = Dialect(comments=True, trailing_commas=True)

# --- generated documents -------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
)  # fmt: skip
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=6), children, max_size=4)),
    max_leaves=25,
)
_whitespace = st.text(alphabet=" \t\r\n", max_size=3)


_comment = st.sampled_from(["/* c */", "/**/", "// line\n", "/* a, b: } ] */", "// {\r\n"])


@st.composite
def _document(draw: st.DrawFn, comments: bool = False) -> tuple[str, object]:
    """A JSON text of a random value, every gap filled with random whitespace (and comments, for
    the JSONC dialect), strings spelled with random escapes, numbers with random exponent spelling."""

    def ws() -> str:
        if comments and draw(st.booleans()):
            return draw(_whitespace) + draw(_comment) + draw(_whitespace)
        return draw(_whitespace)

    def string(value: str) -> str:
        return json.dumps(value, ensure_ascii=draw(st.booleans())).replace("/", "\\/" if draw(st.booleans()) else "/")

    def render(value: object) -> str:
        if isinstance(value, dict):
            members = [ws() + string(k) + ws() + ":" + ws() + render(v) + ws() for k, v in value.items()]
            return "{" + (",".join(members) if members else ws()) + "}"
        if isinstance(value, list):
            items = [ws() + render(v) + ws() for v in value]
            return "[" + (",".join(items) if items else ws()) + "]"
        if isinstance(value, str):
            return string(value)
        if isinstance(value, float) and draw(st.booleans()):
            return repr(value).replace("e", "E")
        return json.dumps(value)

    value = draw(_values)
    return ws() + render(value) + ws(), value


def _same(a: object, b: object) -> bool:
    # Floats are compared by value; json.loads and the scanner must give the same floats anyway.
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(_document())
def test_every_generated_document_parses_to_its_value_and_splices_back_to_itself(doc: tuple[str, object]) -> None:
    text, value = doc
    root = parse(text)
    assert to_python(root) == json.loads(text)
    assert splice(text, []) == text
    for node in walk(root):
        source = text[node.start : node.end]
        assert _same(json.loads(source), to_python(node))
        # Replacing any value by its own source text is the identity too.
        assert splice(text, [Splice(node.start, node.end, source)]) == text
    if isinstance(root, Object):
        for member in root.members:
            assert json.loads(text[member.key_start : member.key_end]) == member.key


@settings(derandomize=True, max_examples=200, deadline=None)
@given(_document(comments=True))
def test_every_generated_document_with_comments_parses_in_the_comment_dialect(doc: tuple[str, object]) -> None:
    text, value = doc
    root = parse(text, JSONC)
    assert to_python(root) == value
    for node in walk(root):
        source = text[node.start : node.end]
        assert _same(to_python(parse(source, JSONC)), to_python(node))
        assert splice(text, [Splice(node.start, node.end, source)]) == text


def test_numbers_keep_their_spelling_and_big_integers_their_exact_value() -> None:
    text = '{"a": 9007199254740993, "b": 1.0, "c": 1e3, "d": -0.5E-7}'
    root = parse(text)
    assert isinstance(root, Object)
    spelled = [text[m.value.start : m.value.end] for m in root.members]
    assert spelled == ["9007199254740993", "1.0", "1e3", "-0.5E-7"]
    assert to_python(root)["a"] == 2**53 + 1  # type: ignore[index]


def test_string_escapes_are_decoded_and_their_source_is_kept() -> None:
    text = '["caf\\u00e9 \\/ \\ud83d\\ude00"]'
    root = parse(text)
    assert isinstance(root, Array)
    item = root.items[0]
    assert isinstance(item, Scalar) and item.value == "café / \U0001f600"
    assert text[item.start : item.end] == '"caf\\u00e9 \\/ \\ud83d\\ude00"'


def test_duplicate_keys_are_kept_in_order_and_reported() -> None:
    root = parse('{"a": 1, "b": 2, "a": 3}')
    assert isinstance(root, Object)
    assert [m.key for m in root.members] == ["a", "b", "a"]
    assert root.duplicate_key() == "a"
    assert [to_python(m.value) for m in root.find("a")] == [1, 3]


def test_comments_and_trailing_commas_are_accepted_only_in_their_dialect() -> None:
    text = '// head\n{"a": [1, 2,], /* mid */ "b": {"c": 1,},}\n'
    assert to_python(parse(text, JSONC)) == {"a": [1, 2], "b": {"c": 1}}
    with pytest.raises(JsonSyntaxError, match="line 1, column 1"):
        parse(text, STRICT)
    with pytest.raises(JsonSyntaxError, match="trailing comma"):
        parse('{"a": [1, 2,]}', Dialect(comments=True))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1,}', "line 1, column 9: trailing comma before '}'"),
        ('{"a" 1}', "expected ':'"),
        ('{"a": 01}', "expected ',' or '}'"),
        ('{"a": tru}', "expected a value"),
        ('{"a": "x\ny"}', "bad string"),
        ('{"a": "\\q"}', "bad string"),
        ("{'a': 1}", "member name in double quotes"),
        ('{"a": 1}\n{"b": 2}', "line 2, column 1: unexpected text after the document"),
        ("", "unexpected end of file"),
        ('{"a": [1, 2', "expected ',' or ']'"),
        ("/* open", "expected a value"),
    ],
)
def test_malformed_documents_are_refused_with_line_and_column(text: str, message: str) -> None:
    with pytest.raises(JsonSyntaxError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse(text)


def test_an_unterminated_comment_is_refused_in_the_comment_dialect() -> None:
    with pytest.raises(JsonSyntaxError, match="unterminated /\\* comment"):
        parse("{} /* open", JSONC)


def test_nesting_deeper_than_the_limit_is_refused_without_a_recursion_error() -> None:
    deep = "[" * (MAX_NESTING_DEPTH + 1) + "]" * (MAX_NESTING_DEPTH + 1)
    with pytest.raises(JsonSyntaxError, match="nested deeper"):
        parse(deep)
    ok = "[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH
    assert isinstance(parse(ok), Array)


def test_splice_keeps_the_order_of_inserts_at_one_position_and_refuses_overlaps() -> None:
    assert splice("abc", [Splice(1, 1, "X"), Splice(1, 1, "Y"), Splice(1, 2, "-")]) == "aXY-c"
    assert splice("abc", [Splice(0, 1, ""), Splice(1, 1, "!")]) == "!bc"
    with pytest.raises(ValueError, match="overlapping"):
        splice("abcdef", [Splice(0, 3, ""), Splice(2, 4, "")])
