import json

from bir.core.tool_text import model_text


def result(*texts: str, is_error: bool = False) -> str:
    return json.dumps({"content": [{"type": "text", "text": t} for t in texts], "isError": is_error})


def test_a_call_tool_result_reads_as_its_text_content_unescaped() -> None:
    rows = json.dumps([{"id": "dev-1", "name": 'a "quoted" name'}])
    assert model_text(result(rows)) == rows


def test_several_content_items_are_joined_by_lines_and_non_text_is_named() -> None:
    mixed = json.dumps({"content": [{"type": "text", "text": "one"}, {"type": "image", "data": "..."}]})
    assert model_text(mixed) == "one\n[image content]"


def test_an_error_result_says_the_tool_reported_an_error() -> None:
    assert model_text(result("boom", is_error=True)) == "(the tool reported an error) boom"


def test_anything_that_is_not_a_call_tool_result_is_left_as_is() -> None:
    for text in ("plain", '{"stdout": "hi"}', '{"content": [1]}', "{not json", "[1, 2]"):
        assert model_text(text) == text
