import os
import stat
import subprocess
import time
from pathlib import Path

from bir.core.bundle import BASH_CHANNEL_MAX, BASH_INLINE_MAX, MAX_REPLAY_REASON
from bir.core.delivery import deliver, sweep, tmp_dir


def test_a_short_bundle_rides_inline_in_a_heredoc_for_bash(tmp_path: Path) -> None:
    found = deliver("step results", "Bash", tmp_path)
    assert found.channel == "bash_clean"
    assert found.command is not None
    assert found.command.startswith("cat <<'BIR_EOF_")
    assert not tmp_dir(tmp_path).exists()


def test_a_long_bundle_is_printed_from_a_private_file_capped_at_the_channel(tmp_path: Path) -> None:
    text = "x" * (BASH_CHANNEL_MAX + 500)
    found = deliver(text, "Bash", tmp_path)
    assert found.command is not None
    assert found.command.startswith("cat ")
    (path,) = tmp_dir(tmp_path).iterdir()
    assert found.command == f"cat {path}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text()) == BASH_CHANNEL_MAX
    assert BASH_INLINE_MAX < BASH_CHANNEL_MAX


def test_when_the_file_cannot_be_written_the_bundle_is_denied_in(tmp_path: Path) -> None:
    blocker = tmp_path / "home"
    blocker.write_text("a file where the folder should be")
    found = deliver("y" * (BASH_INLINE_MAX + 1), "Bash", blocker)
    assert found.channel == "deny_inject"
    assert found.reason == "y" * (BASH_INLINE_MAX + 1)


def test_any_other_tool_gets_the_bundle_as_a_capped_deny_reason(tmp_path: Path) -> None:
    found = deliver("z" * (MAX_REPLAY_REASON + 10), "Grep", tmp_path)
    assert found.channel == "deny_inject"
    assert found.reason is not None
    assert len(found.reason) == MAX_REPLAY_REASON


def test_bundle_files_older_than_an_hour_are_swept(tmp_path: Path) -> None:
    folder = tmp_dir(tmp_path)
    folder.mkdir()
    old, new, other = folder / "bundle-old.txt", folder / "bundle-new.txt", folder / "keep.txt"
    for path in (old, new, other):
        path.write_text("x")
    hour_ago = time.time() - 3700
    os.utime(old, (hour_ago, hour_ago))
    os.utime(other, (hour_ago, hour_ago))
    assert sweep(folder) == 1
    assert sorted(p.name for p in folder.iterdir()) == ["bundle-new.txt", "keep.txt"]


def test_the_bash_delivery_prints_no_control_character(tmp_path: Path) -> None:
    text = "\x1b]0;owned\x07title \x1b[2Jand \x9b31mred\r\nsecond line\tend"
    found = deliver(text, "Bash", tmp_path)
    assert found.command is not None
    printed = subprocess.run(["bash", "-c", found.command], capture_output=True, text=True, check=True).stdout
    assert printed == "]0;ownedtitle [2Jand 31mred\nsecond line\tend\n"
