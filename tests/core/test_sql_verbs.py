"""The verbs an SQL text runs."""

from __future__ import annotations

import pytest

from bir.core.sql_verbs import statement_verbs


@pytest.mark.parametrize(
    ("sql", "verbs"),
    [
        ("SELECT * FROM t", ("SELECT",)),
        ("select 1; delete from t;", ("SELECT", "DELETE")),
        ("SELECT ';DROP TABLE x' FROM t", ("SELECT",)),
        ("SELECT 'it''s; fine'", ("SELECT",)),
        ('SELECT "a;b" FROM t', ("SELECT",)),
        ("SELECT 1 -- ; DELETE\n", ("SELECT",)),
        ("/* DELETE; */ SELECT 1", ("SELECT",)),
        ("SELECT $$; DROP$$, $tag$ ; $tag$", ("SELECT",)),
        ("WITH x AS (SELECT 1) DELETE FROM t", ("DELETE",)),
        ("WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", ("SELECT",)),
        ("EXPLAIN ANALYZE DELETE FROM t", ("EXPLAIN ANALYZE DELETE",)),
        ("EXPLAIN SELECT 1", ("EXPLAIN SELECT",)),
        ("(SELECT 1) UNION (SELECT 2)", ("SELECT",)),
        (";;  ; -- nothing", ()),
        ("", ()),
        ("SELECT 'unclosed; DELETE", ("SELECT",)),
    ],
)
def test_each_statement_s_verb_is_found_outside_literals_and_comments(sql: str, verbs: tuple[str, ...]) -> None:
    assert statement_verbs(sql) == verbs


def test_a_huge_text_is_read_in_one_pass() -> None:
    assert statement_verbs("SELECT " + "'x'," * 100_000 + "1") == ("SELECT",)
