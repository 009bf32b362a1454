"""What a command writes or executes beyond its heads: redirections and the options that do it."""

from __future__ import annotations

import pytest

from bir.core.shell_effects import Effect
from bir.core.shell_shape import command_profile


@pytest.mark.parametrize(
    ("command", "effects"),
    [
        ("cat README.md > /home/user/.bashrc", [Effect(">", "/home/user/.bashrc")]),
        ("echo x >> log.txt 2>&1", [Effect(">>", "log.txt")]),
        ("make &> build.log", [Effect(">", "build.log")]),
        ("ls > /dev/null 2>&1 < input.txt", []),
        ("git -c core.pager=sh log", [Effect("git -c", "core.pager=sh")]),
        ("find . -name x -exec rm {} \\;", [Effect("find -exec", "rm {}")]),
        ("find . -delete", [Effect("find -delete", "")]),
        ("curl -sSLo out.json https://example.com", [Effect("curl -o", "out.json")]),
        ("curl --output=a/b/../c.json https://example.com", [Effect("curl --output", "a/c.json")]),
        ("tar -C / -xzf a.tar", [Effect("tar -C", "/"), Effect("tar -x", "")]),
        ("tar -tf a.tar", []),
        ("sed -i.bak s/a/b/ f", [Effect("sed -i", ".bak")]),
        ("sed -n 1p f", []),
        ("echo x | tee a b", [Effect("tee", "a"), Effect("tee", "b")]),
        ("dd if=x of=/dev/sda", [Effect("dd of=", "/dev/sda")]),
        ("bash -c 'echo hi >> ~/.profile'", [Effect(">>", "~/.profile")]),
        ("env -S 'sh -c x' y", [Effect("env -S", "sh -c x")]),
        ("timeout 5 curl -o x.json u", [Effect("curl -o", "x.json")]),
        ("git log -- -c", []),
        ("git log --format=%s -1", []),
    ],
)
def test_a_command_s_writes_and_executions_are_its_effects(command: str, effects: list[Effect]) -> None:
    assert list(command_profile(command).effects) == sorted(effects)


def test_a_profile_keeps_the_shape_of_the_command() -> None:
    profile = command_profile("git log > out.txt && curl -o x.json URL")
    assert profile.shape == (("git", "log"), "&&", ("curl",))
    assert profile.effects == (Effect(">", "out.txt"), Effect("curl -o", "x.json"))
