"""The shape of a shell command line: its commands' heads and how they are chained (spec §7).

The pin guard keeps a pin only for a call that plausibly *is* the step, and for a shell command that
means: the same commands, chained the same way, each with the same head. A head is the program plus
its subcommand (``git push``, ``npm test``) or plus what it runs (``npm run lint``, ``npx eslint``,
``python deploy.py``, ``python -m pytest``, ``uv run pytest``). Arguments beyond the head are free:
the pin replaces them with the step's.

Decisions (documented here because the spec leaves them open):

- ``;`` and a line break are the same separator, as they are to the shell; blank lines, a trailing
  ``;`` and a line break after ``&&``/``||``/``|`` are not commands.
- ``bash -c 'git push'`` (and ``sh``/``zsh``/``dash``/``ksh -c``, ``pwsh -Command``) counts as what
  it runs, chain and all.
- Leading ``NAME=value`` assignments, ``env`` (with its options and assignments), ``command``,
  ``builtin``, ``exec``, ``nohup``, ``time``, ``nice`` and ``timeout`` are transparent.
- ``sudo`` and ``doas`` are *not*: they stay in the head (``sudo systemctl restart``), so a model's
  ``systemctl restart`` is never turned into a privileged step, nor the other way round.
- ``python3``/``python3.11`` are ``python``; a program given by path keeps its path.
- ``python -c CODE`` and ``node -e CODE`` keep the code in the head: the code is what runs.
- For a program not known to have no subcommands, a first argument that is a bare word
  (``mytool deploy``) is taken as its subcommand: reading too much into a head only declines a pin,
  reading too little could turn a ``destroy`` into a ``deploy``.

Commands are lexed with the standard library's ``shlex`` in POSIX mode; an operator that was quoted
or escaped (``';'``, ``\\;``) is an argument, not a separator.
"""

from __future__ import annotations

import io
import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Final

from bir.core.shell_effects import Effect, option_effects, redirect_effect

Head = tuple[str, ...]
# A shape alternates heads and operators, e.g. (("git", "add"), "&&", ("git", "commit")).
ShapeItem = Head | str
Shape = tuple[ShapeItem, ...]


class ShellParseError(ValueError):
    """A command line that cannot be read (an unclosed quote, nesting too deep)."""


_PUNCTUATION: Final = "();<>|&\n"
_OPERATORS: Final = tuple(
    sorted(
        (
            "&&", "||", ";;", "|&", "&>>", "&>", ">>", ">&", "<&", "<<<", "<<-", "<<", "<>", ">|",
            ";", "|", "&", "<", ">", "(", ")", "\n",
        ),
        key=len,
        reverse=True,
    )
)  # fmt: skip
_REDIRECTS: Final = frozenset({"&>>", "&>", ">>", ">&", "<&", "<<<", "<<-", "<<", "<>", ">|", "<", ">"})
_SEQUENCE: Final = ";"
_BINARY: Final = frozenset({"&&", "||", "|", "|&", ";;", "&", "(", _SEQUENCE})
_MAX_DEPTH: Final = 4

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
_BARE_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_:][A-Za-z0-9]+)*")
_PYTHON = re.compile(r"python[0-9.]*")
_SUBSTITUTION = re.compile(r"\$\(|`|[<>]\(")

_SHELLS: Final = frozenset({"bash", "sh", "zsh", "dash", "ksh", "fish"})
_POWERSHELLS: Final = frozenset({"pwsh", "powershell"})
_TRANSPARENT: Final = frozenset({"env", "command", "builtin", "exec", "nohup", "time", "nice", "timeout", "stdbuf"})
_ELEVATE: Final = frozenset({"sudo", "doas"})
_CODE_FLAGS: Final = {
    "python": frozenset({"-c"}),
    "node": frozenset({"-e", "--eval", "-p", "--print"}),
    "ruby": frozenset({"-e"}),
    "perl": frozenset({"-e", "-E"}),
    "php": frozenset({"-r"}),
}
_INTERPRETERS: Final = frozenset({"python", "node", "ruby", "perl", "php", "deno", "bun", "tsx", "ts-node", "rscript"})
# Runners whose next word is another command line: `npx eslint`, `uvx ruff`.
_RUNNERS: Final = frozenset({"npx", "pnpx", "bunx", "uvx", "xargs"})
# `<program> <subcommand>` pairs that run another command line: `uv run pytest`.
_RUN_SUBCOMMANDS: Final = frozenset(
    {
        ("uv", "run"), ("poetry", "run"), ("pipenv", "run"), ("pdm", "run"), ("hatch", "run"), ("rye", "run"),
        ("conda", "run"), ("mamba", "run"), ("pixi", "run"), ("pipx", "run"), ("npm", "exec"), ("pnpm", "exec"),
        ("pnpm", "dlx"), ("yarn", "dlx"), ("yarn", "exec"), ("bun", "x"), ("bundle", "exec"),
    }
)  # fmt: skip
# `<program> run <script>` names a package script.
_SCRIPT_RUNNERS: Final = frozenset({"npm", "pnpm", "yarn", "bun", "deno"})
# Subcommands that group further subcommands (`gh pr merge`, `git stash drop`); "*" means all of them.
_NESTED: Final = {
    "gh": frozenset({"*"}), "docker": frozenset({"*"}), "podman": frozenset({"*"}), "aws": frozenset({"*"}),
    "gcloud": frozenset({"*"}), "az": frozenset({"*"}), "kubectl": frozenset({"*"}), "oc": frozenset({"*"}),
    "terraform": frozenset({"*"}), "helm": frozenset({"*"}), "heroku": frozenset({"*"}), "fly": frozenset({"*"}),
    "flyctl": frozenset({"*"}), "supabase": frozenset({"*"}), "wrangler": frozenset({"*"}),
    "firebase": frozenset({"*"}), "doctl": frozenset({"*"}),
    "git": frozenset({"stash", "remote", "worktree", "submodule", "lfs", "bisect", "notes", "sparse-checkout"}),
    "npm": frozenset({"cache", "config"}), "pnpm": frozenset({"store", "config"}),
    "yarn": frozenset({"cache", "config"}),
    "pip": frozenset({"cache", "config"}), "uv": frozenset({"pip", "python", "tool", "cache", "self"}),
    "poetry": frozenset({"env", "self", "cache", "source"}), "conda": frozenset({"env"}),
    "brew": frozenset({"services"}),
}  # fmt: skip
# Options that take a separate value before the subcommand (`git -C repo push`).
_VALUE_OPTIONS: Final = {
    "git": frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"}),
    "docker": frozenset({"-H", "--host", "-c", "--context", "--config", "-l", "--log-level"}),
    "kubectl": frozenset({"-n", "--namespace", "--context", "--cluster", "--kubeconfig", "-s", "--server", "--user"}),
    "helm": frozenset({"-n", "--namespace", "--kube-context", "--kubeconfig"}),
    "make": frozenset({"-C", "-f", "--file", "--directory", "-j", "-l", "-I", "-o", "-W"}),
    "npm": frozenset({"--prefix", "-C", "-w", "--workspace"}),
    "pnpm": frozenset({"-C", "--dir", "--filter", "-F", "-w", "--workspace"}),
    "yarn": frozenset({"--cwd"}),
    "cargo": frozenset({"-C", "--config", "-Z", "--manifest-path"}),
    "gh": frozenset({"-R", "--repo"}),
    "aws": frozenset({"--profile", "--region", "--output", "--endpoint-url"}),
    "gcloud": frozenset({"--project", "--account", "--configuration"}),
    "az": frozenset({"--subscription"}),
    "uv": frozenset({
        "--directory", "--project", "--python", "-p", "--with", "--with-requirements", "--extra", "--group",
        "--env-file", "--package", "--index", "--index-url", "--cache-dir", "--config-file", "--from",
    }),
    "uvx": frozenset({"--from", "--with", "--python", "-p"}),
    "poetry": frozenset({"-C", "--directory", "-P", "--project"}),
    "conda": frozenset({"-n", "--name", "-p", "--prefix"}),
    "mamba": frozenset({"-n", "--name", "-p", "--prefix"}),
    "pixi": frozenset({"-e", "--environment", "--manifest-path"}),
    "npx": frozenset({"-p", "--package", "-c", "--call"}),
    "pnpx": frozenset({"-p", "--package"}),
    "xargs": frozenset({"-I", "-n", "-P", "-L", "-d", "-E", "-s", "-a"}),
    "python": frozenset({"-W", "-X"}),
    "node": frozenset({"-r", "--require", "--import", "--loader", "--experimental-loader", "-C", "--conditions"}),
    "ruby": frozenset({"-I", "-r"}),
    "perl": frozenset({"-I", "-M"}),
    "sudo": frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T"}),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
}  # fmt: skip
# Programs whose first argument is an operand, never a subcommand.
_PLAIN: Final = frozenset(
    {
        "ls", "cat", "rm", "cp", "mv", "mkdir", "rmdir", "touch", "echo", "printf", "grep", "egrep", "rg", "ag", "find",
        "fd", "head", "tail", "wc", "sort", "uniq", "cut", "tr", "sed", "awk", "diff", "cmp", "chmod", "chown", "ln",
        "stat", "file", "du", "df", "tree", "less", "more", "which", "whereis", "type", "realpath", "readlink",
        "basename", "dirname", "curl", "wget", "jq", "yq", "cd", "pushd", "popd", "pwd", "sleep", "kill", "pkill",
        "ps", "tee", "xxd", "od", "open", "test", "true", "false", "date", "whoami", "hostname", "uname", "export",
        "source", ".", "set", "unset", "read", "tar", "zip", "unzip", "gzip", "gunzip", "ssh", "scp", "rsync",
        "pytest", "jest", "vitest", "mocha", "eslint", "prettier", "tsc", "mypy", "black", "isort", "flake8",
        "pylint", "shellcheck", "clear", "history", "sha256sum", "md5sum", "base64",
    }
)  # fmt: skip


@dataclass(frozen=True)
class _Token:
    text: str
    operator: bool
    quoted: bool


def has_substitution(command: str) -> bool:
    """True when a command contains a command or process substitution (``$(…)``, backticks, ``<(…)``)."""
    return _SUBSTITUTION.search(command) is not None


def _split_operators(run: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(run):
        for op in _OPERATORS:
            if run.startswith(op, i):
                out.append(op)
                i += len(op)
                break
        else:  # pragma: no cover - every punctuation character is an operator
            out.append(run[i])
            i += 1
    return out


def _tokens(command: str, powershell: bool) -> list[_Token]:
    # A backslash-newline is a line continuation to the shell, not a separator.
    text = command.replace("\\\r\n", "").replace("\\\n", "")
    stream = io.StringIO(text)
    lex = shlex.shlex(stream, posix=True, punctuation_chars=_PUNCTUATION)
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = ""
    if powershell:
        lex.escape = ""
    out: list[_Token] = []
    start = 0
    while True:
        try:
            token = lex.get_token()
        except ValueError as exc:
            raise ShellParseError(str(exc)) from None
        if token is None:
            break
        # shlex hides whether a token was quoted; the raw text it was read from does not.
        end = stream.tell() - len(getattr(lex, "_pushback_chars", ()))
        raw = text[start:end]
        start = end
        quoted = any(q in raw for q in "'\"\\")
        if token and not quoted and all(c in _PUNCTUATION for c in token):
            out.extend(_Token(op, True, False) for op in _split_operators(token))
        else:
            out.append(_Token(token, False, quoted))
    return out


def _program(word: str, powershell: bool) -> str:
    name = word.lower() if powershell else word
    if "/" in name:
        return posixpath.normpath(name)
    if name.lower().endswith(".exe"):
        name = name[:-4]
    return "python" if _PYTHON.fullmatch(name) else name


def _skip_options(words: list[_Token], i: int, program: str) -> int:
    """Index of the first operand at or after ``i``, past options (and the values of known ones)."""
    takes_value = _VALUE_OPTIONS.get(program, frozenset())
    while i < len(words):
        text = words[i].text
        if text == "--":
            return i + 1
        if not text.startswith("-") or text == "-" or words[i].quoted:
            if program == "cargo" and text.startswith("+"):  # cargo +nightly build
                i += 1
                continue
            return i
        i += 2 if text in takes_value else 1
    return i


def _shell_code(words: list[_Token], i: int, powershell_host: bool) -> tuple[int, str] | None:
    """For ``bash [opts] -c CODE`` or ``pwsh -Command CODE``, the index past CODE and CODE itself."""
    while i < len(words):
        text = words[i].text
        if not text.startswith("-") or words[i].quoted:
            return None
        flag = text.lower()
        if powershell_host:
            if flag in ("-c", "-command") and i + 1 < len(words):
                return i + 2, " ".join(w.text for w in words[i + 1 :])
        elif not flag.startswith("--") and "c" in flag[1:] and i + 1 < len(words):
            return i + 2, words[i + 1].text
        i += 1
    return None


def _pairs(words: list[_Token], start: int, end: int | None = None) -> list[tuple[str, bool]]:
    return [(w.text, w.quoted) for w in words[start:end]]


def _head(words: list[_Token], powershell: bool, depth: int, effects: list[Effect]) -> Shape:
    """The shape of one simple command: usually one head, or the chain a ``bash -c`` runs."""
    prefix: list[str] = []
    wrapper = ""
    i = 0
    while True:
        while i < len(words) and not words[i].quoted and _ASSIGNMENT.match(words[i].text):
            i += 1
        if i >= len(words):
            if prefix or wrapper:
                return (tuple(prefix) or (wrapper,),)
            # A line of assignments only: the names assigned are its head.
            return (tuple(w.text.split("=", 1)[0] + "=" for w in words),) if words else ()
        program = _program(words[i].text, powershell)
        if program in _TRANSPARENT:
            wrapper = program
            start = i + 1
            i = _skip_options(words, start, program)
            if not powershell:
                effects.extend(option_effects(program, _pairs(words, start, i)))
            if program == "timeout" and i < len(words):
                i += 1  # the duration
            continue
        if program in _ELEVATE:
            prefix.append(program)
            i = _skip_options(words, i + 1, program)
            continue
        if program in _SHELLS or program in _POWERSHELLS:
            code = _shell_code(words, i + 1, program in _POWERSHELLS)
            if code is not None:
                inner = _shape(code[1], powershell or program in _POWERSHELLS, depth + 1, effects)
                return tuple(item if isinstance(item, str) else (*prefix, *item) for item in inner)
        break
    return ((*prefix, *_program_head(words, i, powershell, depth, effects)),)


def _program_head(words: list[_Token], i: int, powershell: bool, depth: int, effects: list[Effect]) -> Head:
    shown = _program(words[i].text, powershell)
    # `/usr/bin/python3` is looked up as `python` but shown (and compared) with its path.
    program = _program(posixpath.basename(shown), powershell) if "/" in shown else shown
    rest = i + 1
    if program in _RUNNERS:
        j = _skip_options(words, rest, program)
        if not powershell:
            effects.extend(option_effects(program, _pairs(words, rest, j)))
        return (shown, *_program_head(words, j, powershell, depth, effects)) if j < len(words) else (shown,)
    if not powershell:
        effects.extend(option_effects(program, _pairs(words, rest)))
    if program in _INTERPRETERS or program in _SHELLS or program in _POWERSHELLS:
        return (shown, *_interpreter_head(program, words, rest, powershell, depth, effects=effects)[1:])
    if program in _PLAIN:
        return (shown,)
    j = _skip_options(words, rest, program)
    if j >= len(words) or not _is_subcommand(words[j]):
        return (shown,)
    sub = _word(words[j], powershell)
    if (program, sub) in _RUN_SUBCOMMANDS:
        k = _skip_options(words, j + 1, program)
        return (shown, sub, *_program_head(words, k, powershell, depth, effects)) if k < len(words) else (shown, sub)
    if program in _SCRIPT_RUNNERS and sub in ("run", "run-script"):
        k = _skip_options(words, j + 1, program)
        return (shown, "run", words[k].text) if k < len(words) else (shown, "run")
    nested = _NESTED.get(program, frozenset())
    if "*" in nested or sub in nested:
        k = _skip_options(words, j + 1, program)
        if k < len(words) and _is_subcommand(words[k]):
            return (shown, sub, _word(words[k], powershell))
    return (shown, sub)


def _interpreter_head(
    program: str, words: list[_Token], i: int, powershell: bool, depth: int, *, effects: list[Effect]
) -> Head:
    code_flags = _CODE_FLAGS.get(program, frozenset())
    takes_value = _VALUE_OPTIONS.get(program, frozenset())
    while i < len(words):
        text = words[i].text
        if text in code_flags:
            return (program, text, words[i + 1].text if i + 1 < len(words) else "")
        if program == "python" and text == "-m":
            if i + 1 >= len(words):
                return (program, "-m")
            return (program, "-m", *_program_head(words, i + 1, powershell, depth, effects))
        if text == "--" or not text.startswith("-") or words[i].quoted:
            break
        i += 2 if text in takes_value else 1
    if i < len(words) and words[i].text == "--":
        i += 1
    if i >= len(words):
        return (program,)
    script = words[i].text
    if program in ("deno", "bun") and script in ("run", "test", "x"):
        return (program, script, *_operand(words, i + 1))
    head: Head = (program, posixpath.normpath(script) if "/" in script else script)
    # A script's own subcommand (`python manage.py migrate`) is part of what it runs.
    j = _skip_options(words, i + 1, "")
    if j < len(words) and _is_subcommand(words[j]):
        head = (*head, _word(words[j], powershell))
    return head


def _operand(words: list[_Token], i: int) -> Head:
    j = _skip_options(words, i, "")
    if j >= len(words):
        return ()
    text = words[j].text
    return (posixpath.normpath(text) if "/" in text else text,)


def _is_subcommand(word: _Token) -> bool:
    return _BARE_WORD.fullmatch(word.text) is not None


def _word(word: _Token, powershell: bool) -> str:
    return word.text.lower() if powershell else word.text


def _shape(command: str, powershell: bool, depth: int, effects: list[Effect]) -> Shape:
    if depth > _MAX_DEPTH:
        raise ShellParseError("commands nested too deeply")
    items: list[ShapeItem] = []
    words: list[_Token] = []
    tokens = _tokens(command, powershell)
    redirect: str | None = None

    def flush() -> None:
        # An unquoted word starting with '#' opens a comment that runs to the end of the command.
        for n, word in enumerate(words):
            if word.text.startswith("#") and not word.quoted:
                del words[n:]
                break
        items.extend(_head(words, powershell, depth, effects))
        words.clear()

    for token in tokens:
        if redirect is not None:
            operator, redirect = redirect, None
            if not token.operator:
                effect = redirect_effect(operator, token.text)
                if effect is not None:
                    effects.append(effect)
                continue
        if not token.operator:
            words.append(token)
            continue
        if token.text in _REDIRECTS:
            redirect = token.text
            # `2>&1`: the descriptor number belongs to the redirection, not to the command.
            if words and words[-1].text.isdigit() and not words[-1].quoted:
                words.pop()
            continue
        flush()
        op = _SEQUENCE if token.text == "\n" else token.text
        if op == _SEQUENCE and (not items or (isinstance(items[-1], str) and items[-1] in _BINARY)):
            continue  # a blank line, or a line break after an operator, separates nothing
        items.append(op)
    flush()
    while items and items[-1] == _SEQUENCE:
        items.pop()
    return tuple(items)


def command_shape(command: str, *, powershell: bool = False) -> Shape:
    """The heads of a command line's commands and the operators that chain them.

    ``git add . && git commit -m x`` → ``(("git", "add"), "&&", ("git", "commit"))``.

    Raises:
        ShellParseError: the command cannot be read (an unclosed quote, ``bash -c`` nested too deeply).
    """
    return _shape(command, powershell, 0, [])


@dataclass(frozen=True)
class Profile:
    """A command line's shape and what it writes or executes beyond its heads (its effects, sorted)."""

    shape: Shape
    effects: tuple[Effect, ...]


def command_profile(command: str, *, powershell: bool = False) -> Profile:
    """The shape of a command line (``command_shape``) and its effects (``bir.core.shell_effects``).

    ``git log > out.txt && curl -o x.json URL`` → shape ``(("git", "log"), "&&", ("curl",))``, effects
    ``(Effect(">", "out.txt"), Effect("curl -o", "x.json"))``.

    Raises:
        ShellParseError: the command cannot be read.
    """
    effects: list[Effect] = []
    shape = _shape(command, powershell, 0, effects)
    return Profile(shape, tuple(sorted(effects)))


def render(shape: Shape) -> str:
    """A shape as text for a reason: ``git add && git commit``."""
    return " ".join(" ".join(item) if isinstance(item, tuple) else ("\\n" if item == "\n" else item) for item in shape)
