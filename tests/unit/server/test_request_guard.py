"""Pure parts of the request guard and of the error answers."""

from taugrid.server.error_answers import field_path, validation_problems
from taugrid.server.request_guard import is_json_type, json_too_deep


def nested(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_nesting_depth() -> None:
    assert not json_too_deep({"a": [1, {"b": "x"}]}, 3)
    assert json_too_deep({"a": [1, {"b": []}]}, 3)
    assert not json_too_deep(nested(64)) and json_too_deep(nested(65))
    assert json_too_deep(nested(100_000))  # iterative: no recursion limit here
    assert not json_too_deep("text") and not json_too_deep(None)


def test_json_content_types() -> None:
    assert is_json_type("application/json; charset=utf-8")
    assert is_json_type("application/merge-patch+json")
    assert not is_json_type("application/gzip") and not is_json_type(None)
    assert not is_json_type("text/plain")


def test_validation_problems_keep_paths_and_never_the_input() -> None:
    errors = [
        {
            "type": "string_type",
            "loc": ("body", "runs", 3, "name"),
            "msg": "Input should be a valid string",
            "input": 123456,
            "ctx": {},
        },
        {
            "type": "value_error",
            "loc": ("body", "env"),
            "msg": "Value error, got 'hunter2-s3cret'",
            "input": "hunter2-s3cret",
        },
        {
            "type": "greater_than_equal",
            "loc": ("query", "limit"),
            "msg": "Input should be greater than or equal to 1",
            "input": "-5",
        },
    ]
    problems = validation_problems(errors)
    assert [(p.file, p.field) for p in problems] == [
        ("request body", "runs[3].name"),
        ("request body", "env"),
        ("query", "limit"),
    ]
    assert "hunter2" not in str([p.__dict__ for p in problems])
    assert problems[1].message == "Value error, got the value"


def test_field_path() -> None:
    assert field_path(["runs", 0, "resolved", "env", "A"]) == "runs[0].resolved.env.A"
    assert field_path([]) == ""
