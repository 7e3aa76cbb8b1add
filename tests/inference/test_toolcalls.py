"""The streaming ``<tool_call>`` extractor: content, calls, and any split of the text."""

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from inference.engines.base import Delta, ToolCallDelta
from inference.toolcalls import ToolCallExtractor, extract, join
from inference.toolprompt import plain_messages

NAMES = ["get_weather", "now", "search"]


def ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def stream(text, cuts, *, parallel=True):
    """Feed ``text`` split at ``cuts``; return all pieces released."""
    extractor = ToolCallExtractor(names=NAMES, parallel=parallel, id_factory=ids())
    bounds = [0, *sorted(set(cuts)), len(text)]
    pieces = []
    for a, b in itertools.pairwise(bounds):
        pieces += extractor.feed(text[a:b])
    return pieces + extractor.flush()


def call(name, arguments):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def test_a_call_streams_its_header_first_then_its_arguments_as_generated():
    text = call("get_weather", '{"city": "Paris"}')
    pieces = stream(text, range(len(text)))  # one character at a time
    first = pieces[0]
    assert first == ToolCallDelta(
        index=0, arguments="", id="call_0", name="get_weather"
    )
    rest = [p.arguments for p in pieces[1:]]
    assert all(isinstance(p, ToolCallDelta) and p.id is None for p in pieces[1:])
    assert len(rest) > 5  # streamed, not released at the end
    assert "".join(rest) == '{"city": "Paris"}'


def test_text_before_a_call_is_content_and_a_partial_marker_is_held_back():
    extractor = ToolCallExtractor(names=NAMES, id_factory=ids())
    assert extractor.feed("Let me check. <tool") == [Delta("Let me check. ")]
    out = extractor.feed('_call>{"name": "now"}</tool_call>')
    assert out[0] == ToolCallDelta(index=0, arguments="", id="call_0", name="now")
    assert out[1] == ToolCallDelta(index=0, arguments="{}")  # no parameters: "{}"
    assert extractor.calls == 1


def test_a_string_argument_may_hold_the_closing_tag_braces_and_escaped_quotes():
    arguments = r'{"q": "a </tool_call> {b} [c] \"d}\" \\", "n": [1, {"x": 2}]}'
    content, calls = extract(call("search", arguments), names=NAMES, id_factory=ids())
    assert content == ""
    assert [c.arguments for c in calls] == [arguments]
    assert json.loads(calls[0].arguments)["q"] == 'a </tool_call> {b} [c] "d}" \\'


def test_two_parallel_calls_get_index_0_and_1_and_one_without_parallel():
    text = call("now", "{}") + "\n" + call("get_weather", '{"city": "Oslo"}')
    _, calls = extract(text, names=NAMES, id_factory=ids())
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_0", "now", "{}"),
        ("call_1", "get_weather", '{"city": "Oslo"}'),
    ]
    extractor = ToolCallExtractor(names=NAMES, parallel=False, id_factory=ids())
    _, calls = join(extractor.feed(text))
    assert [c.name for c in calls] == ["now"]
    assert extractor.done


def test_text_after_the_calls_ends_the_generation():
    extractor = ToolCallExtractor(names=NAMES, id_factory=ids())
    extractor.feed(call("now", "{}") + "\nI will now wait for")
    assert extractor.done
    assert extractor.feed("more") == []


def test_malformed_calls_are_content_never_an_error():
    for text in [
        "<tool_call>not json</tool_call>",
        '<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>',
        '<tool_call>{"arguments": {}, "name": "now"}</tool_call>',
        '<tool_call>{"name": "now", "arguments": "x"}</tool_call>',
        '<tool_call>{"name": "now", "argu',  # cut off in the header
        "a < b <tool_ and <tool_call",
    ]:
        content, calls = extract(text, names=NAMES, id_factory=ids())
        assert (content, calls) == (text, []), text


def test_a_call_after_malformed_text_is_still_found():
    text = "<tool_call>oops " + call("now", "{}")
    content, calls = extract(text, names=NAMES, id_factory=ids())
    assert content == "<tool_call>oops "
    assert [c.arguments for c in calls] == ["{}"]


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.sampled_from('ab{}[]"\\</>_ \nétool_call'), max_size=12),
)
json_value = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
arguments_text = st.builds(
    lambda d, indent, ensure_ascii: json.dumps(
        d, indent=indent, ensure_ascii=ensure_ascii
    ),
    st.dictionaries(st.text(max_size=6), json_value, max_size=4),
    st.sampled_from([None, 0, 2]),
    st.booleans(),
)
generated = st.builds(
    lambda before, calls: before + "\n".join(call(n, a) for n, a in calls),
    st.sampled_from(["", "Sure. ", "x < y <tool", "<tool_call>bad "]),
    st.lists(st.tuples(st.sampled_from(NAMES), arguments_text), min_size=0, max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(generated, st.lists(st.integers(min_value=0, max_value=400), max_size=30))
def test_any_split_gives_the_same_content_and_the_same_arguments(text, cuts):
    whole = extract(text, names=NAMES, id_factory=ids())
    pieces = stream(text, [c for c in cuts if c < len(text)])
    assert join(pieces) == whole
    content, calls = whole
    for c in calls:
        json.loads(c.arguments)  # the raw text, valid as generated
    # first piece of each call: id, name and arguments ""
    heads = [p for p in pieces if isinstance(p, ToolCallDelta) and p.id]
    assert [h.index for h in heads] == list(range(len(calls)))
    assert all(h.arguments == "" for h in heads)


def test_tool_history_renders_for_a_template_without_tools():
    tools = [{"type": "function", "function": {"name": "now", "parameters": {}}}]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Time?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "now", "arguments": "{}"},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "now", "arguments": '{"tz": "UTC"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
        {"role": "tool", "tool_call_id": "call_2", "content": "11:00"},
    ]
    out = plain_messages(messages, tools)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Be brief.")
    assert '<tools>\n{"type": "function"' in out[0]["content"]
    assert out[2]["content"] == (
        '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "now", "arguments": {"tz": "UTC"}}\n</tool_call>'
    )
    assert out[3]["content"] == (
        "<tool_response>\n12:00\n</tool_response>\n"
        "<tool_response>\n11:00\n</tool_response>"
    )
    # what the model wrote reads back as the same calls
    _, calls = extract(out[2]["content"], names=["now"], id_factory=ids())
    assert [c.arguments for c in calls] == ["{}", '{"tz": "UTC"}']
