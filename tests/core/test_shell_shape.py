"""The heads and chain of a command line."""

from __future__ import annotations

import shlex

import pytest

from bir.core.shell_shape import ShellParseError, command_shape, has_substitution, render


@pytest.mark.parametrize(
    ("command", "shape"),
    [
        ("git push origin main", (("git", "push"),)),
        ("npm run lint", (("npm", "run", "lint"),)),
        ("python -m pytest -q", (("python", "-m", "pytest"),)),
        ("uv run python -m pytest", (("uv", "run", "python", "-m", "pytest"),)),
        ("sudo bash -c 'a && b'", (("sudo", "a"), "&&", ("sudo", "b"))),
        ("git add . && git commit -m x", (("git", "add"), "&&", ("git", "commit"))),
        ("a;\n\nb;", (("a",), ";", ("b",))),
        ("a &&\n b", (("a",), "&&", ("b",))),
        ("echo ';' | cat", (("echo",), "|", ("cat",))),
        ("x 2>&1 >/dev/null &", (("x",), "&")),
        ("(cd x && make build)", ("(", ("cd",), "&&", ("make", "build"), ")")),
        ("# note\ngit push # go", (("git", "push"),)),
        ("FOO=1", (("FOO=",),)),
        ("timeout 5 env -u X nice -n 5 make test", (("make", "test"),)),
        ("/usr/bin/python3 tools/x.py", (("/usr/bin/python3", "tools/x.py"),)),
        ("git \\\n  push", (("git", "push"),)),
    ],
)
def test_a_command_line_has_the_heads_and_chain_the_shell_would_run(command: str, shape: tuple[object, ...]) -> None:
    assert command_shape(command) == shape


def test_powershell_heads_are_lower_case_and_backslashes_are_literal() -> None:
    assert command_shape("Get-Item C:\\x | Remove-Item", powershell=True) == (("get-item",), "|", ("remove-item",))


def test_an_unclosed_quote_is_a_parse_error() -> None:
    with pytest.raises(ShellParseError, match="No closing quotation"):
        command_shape("echo 'x")


def test_bash_c_nested_too_deeply_is_a_parse_error() -> None:
    command = "git push"
    for _ in range(6):
        command = f"bash -c {shlex.quote(command)}"
    with pytest.raises(ShellParseError, match="nested too deeply"):
        command_shape(command)


@pytest.mark.parametrize(
    ("command", "found"),
    [("echo $(date)", True), ("echo `id`", True), ("diff <(a) b", True), ("echo $HOME", False)],
)
def test_substitutions_are_found(command: str, found: bool) -> None:
    assert has_substitution(command) is found


def test_a_shape_renders_as_text() -> None:
    assert render(command_shape("git add . && git commit")) == "git add && git commit"
