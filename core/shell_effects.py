"""What a shell command writes or executes beyond its heads: redirections and the options that do it.

The pin guard compares commands by their heads and chain, leaving arguments free (the pin replaces
them). Some arguments are not free: a redirection writes a file, and a few options write or execute
where the command's operands never would (``git -c core.pager=…``, ``find … -exec``, ``curl -o``,
``tar -C /``, ``sed -i``). Each becomes an ``Effect``, so a pinned command can be held to write and
execute only where the step's recorded command and the model's own call did (issue 16).

The table is what a reviewer can check against each program's manual; an option missing from it is
an argument like any other. Redirections to ``/dev/null``, ``/dev/stdout``, ``/dev/stderr`` and
descriptor copies (``2>&1``) write nowhere and are not effects.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

# How an option is used: a flag, one value (``-o FILE``, ``-oFILE``, ``--output=FILE``), an optional
# value attached to it (``sed -i.bak``), or a command running to ``;`` or ``+`` (``find -exec``).
Arity = Literal["flag", "value", "attached", "command"]


@dataclass(frozen=True, order=True)
class Effect:
    """One thing a command writes or executes: ``name`` (``>``, ``>>``, ``curl -o``) and its target.

    ``target`` is the file or value it acts on (``""`` for a flag); normalised for paths.
    """

    name: str
    target: str

    def shown(self) -> str:
        return f"{self.name} {self.target}".strip()


_F: Final = "flag"
_V: Final = "value"
_A: Final = "attached"
_C: Final = "command"

# fmt: off
_OPTIONS: Final[Mapping[str, Mapping[str, Arity]]] = {
    "git": {
        "-c": _V, "--config-env": _V, "--exec-path": _A, "-C": _V, "--git-dir": _V, "--work-tree": _V,
        "--upload-pack": _V, "--receive-pack": _V, "--exec": _V, "--output": _V, "--output-directory": _V,
        "--template": _V,
    },
    "find": {
        "-exec": _C, "-execdir": _C, "-ok": _C, "-okdir": _C, "-delete": _F, "-fprint": _V, "-fprint0": _V,
        "-fprintf": _V, "-fls": _V,
    },
    "curl": {
        "-o": _V, "--output": _V, "-O": _F, "--remote-name": _F, "--remote-name-all": _F, "--output-dir": _V,
        "--create-dirs": _F, "-K": _V, "--config": _V, "-T": _V, "--upload-file": _V, "-D": _V,
        "--dump-header": _V, "-c": _V, "--cookie-jar": _V, "--trace": _V, "--trace-ascii": _V, "--stderr": _V,
        "--libcurl": _V, "--etag-save": _V, "--hsts": _V, "--alt-svc": _V,
    },
    "wget": {
        "-O": _V, "--output-document": _V, "-o": _V, "--output-file": _V, "-a": _V, "--append-output": _V,
        "-P": _V, "--directory-prefix": _V, "-e": _V, "--execute": _V, "--post-file": _V, "--body-file": _V,
        "-r": _F, "--recursive": _F, "-m": _F, "--mirror": _F,
    },
    "tar": {
        "-C": _V, "--directory": _V, "--to-command": _V, "-I": _V, "--use-compress-program": _V,
        "--checkpoint-action": _V, "-F": _V, "--info-script": _V, "--new-volume-script": _V,
        "--rsh-command": _V, "-x": _F, "--extract": _F, "--get": _F, "-c": _F, "--create": _F, "-r": _F,
        "--append": _F, "-u": _F, "--update": _F, "-A": _F, "--catenate": _F, "--delete": _F,
    },
    "sed": {"-i": _A, "--in-place": _A},
    "perl": {"-i": _A},
    "ruby": {"-i": _A},
    "sort": {"-o": _V, "--output": _V},
    "ssh": {"-o": _V, "-F": _V, "-E": _V},
    "scp": {"-o": _V, "-F": _V, "-S": _V},
    "rsync": {"-e": _V, "--rsh": _V, "--rsync-path": _V, "--delete": _F, "--remove-source-files": _F},
    "env": {"-S": _V, "--split-string": _V, "-C": _V, "--chdir": _V},
    "time": {"-o": _V, "--output": _V},
    "make": {"-C": _V, "--directory": _V, "-f": _V, "--file": _V, "--makefile": _V, "--eval": _V},
    "node": {"-r": _V, "--require": _V, "--import": _V, "--loader": _V, "--experimental-loader": _V},
    "npx": {"-c": _V, "--call": _V},
    "docker": {
        "-v": _V, "--volume": _V, "--mount": _V, "--privileged": _F, "--entrypoint": _V, "-H": _V, "--host": _V,
    },
    "cp": {"-t": _V, "--target-directory": _V},
    "mv": {"-t": _V, "--target-directory": _V},
    "ln": {"-t": _V, "--target-directory": _V},
    "install": {"-t": _V, "--target-directory": _V},
    "unzip": {"-d": _V},
    "zip": {"-TT": _V, "--unzip-command": _V},
    "awk": {"-f": _V, "-i": _V, "--include": _V, "-E": _V, "--exec": _V},
    "gawk": {"-f": _V, "-i": _V, "--include": _V, "-E": _V, "--exec": _V},
    "patch": {"-o": _V, "--output": _V, "-d": _V, "--directory": _V},
    "xargs": {"-a": _V, "--arg-file": _V},
}
# fmt: on
# Programs whose single-dash options are whole words (``-exec``), never clusters of letters.
_WORD_OPTIONS: Final = frozenset({"find"})
# Programs every operand of which is a file they write.
_WRITES_OPERANDS: Final = frozenset({"tee"})
# ``dd of=FILE``: operands of this form name where the program writes.
_OPERAND_PREFIXES: Final[Mapping[str, tuple[str, ...]]] = {"dd": ("of=",)}

WRITE_REDIRECTS: Final[Mapping[str, str]] = {
    ">": ">", ">|": ">", "&>": ">", ">&": ">", ">>": ">>", "&>>": ">>", "<>": "<>",
}  # fmt: skip
_HARMLESS_TARGETS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})


def _place(text: str) -> str:
    text = text.strip()
    return posixpath.normpath(text) if "/" in text else text


def redirect_effect(operator: str, target: str) -> Effect | None:
    """The effect of a redirection with ``target``, or None when it writes nowhere (a read, ``2>&1``)."""
    name = WRITE_REDIRECTS.get(operator)
    if name is None:
        return None
    place = _place(target)
    if place in _HARMLESS_TARGETS or place.isdigit():
        return None
    return Effect(name, place)


def option_effects(program: str, words: Sequence[tuple[str, bool]]) -> list[Effect]:
    """The effects among one program's arguments; ``words`` are ``(text, quoted)`` pairs after the program.

    Scanning stops at ``--``: what follows is operands.
    """
    table = _OPTIONS.get(program, {})
    out: list[Effect] = []
    prefixes = _OPERAND_PREFIXES.get(program, ())
    i = 0
    while i < len(words):
        text, quoted = words[i]
        i += 1
        if text == "--" and not quoted:
            if program in _WRITES_OPERANDS:
                out.extend(Effect(program, _place(t)) for t, _ in words[i:])
            break
        if quoted or not text.startswith("-") or text == "-":
            if program in _WRITES_OPERANDS:
                out.append(Effect(program, _place(text)))
            for prefix in prefixes:
                if text.startswith(prefix):
                    out.append(Effect(f"{program} {prefix}", _place(text[len(prefix) :])))
            continue
        if not table:
            continue
        if text.startswith("--") or program in _WORD_OPTIONS:
            name, has_value, value = text.partition("=")
            arity = table.get(name)
            if arity is None:
                continue
            if has_value:
                out.append(Effect(f"{program} {name}", _place(value)))
            elif arity == "value" and i < len(words):
                out.append(Effect(f"{program} {name}", _place(words[i][0])))
                i += 1
            elif arity == "command":
                end = i
                while end < len(words) and words[end][0] not in (";", "+"):
                    end += 1
                out.append(Effect(f"{program} {name}", " ".join(w for w, _ in words[i:end])))
                i = end + 1
            else:
                out.append(Effect(f"{program} {name}", ""))
            continue
        if text in table and len(text) > 2:  # a multi-letter single-dash option (`zip -TT`)
            arity = table[text]
            if arity == "value" and i < len(words):
                out.append(Effect(f"{program} {text}", _place(words[i][0])))
                i += 1
            else:
                out.append(Effect(f"{program} {text}", ""))
            continue
        # A cluster of short options (`-sSLo out`, `-xzf a.tar`, `-i.bak`): letters until one takes a value.
        for n, letter in enumerate(text[1:], start=1):
            name = f"-{letter}"
            arity = table.get(name)
            if arity is None:
                if not letter.isalpha():
                    break
                continue
            rest = text[n + 1 :]
            if arity in ("value", "attached") and rest:
                out.append(Effect(f"{program} {name}", _place(rest)))
                break
            if arity == "value" and i < len(words):
                out.append(Effect(f"{program} {name}", _place(words[i][0])))
                i += 1
                break
            out.append(Effect(f"{program} {name}", ""))
    return out
