"""The small lexicon the matcher and the calculator share: action verbs by class, filler words, stems.

A verb class groups the verbs that ask for the same kind of action ("list", "show" and "get" read;
"close" and "resolve" close). Two prompts that differ in an action class are different tasks, however
close their embeddings are (issue 18: "list the open incidents" vs "close all open incidents").
A word that names an action is never a slot either: a recorded value equal to one is a constant.
"""

from __future__ import annotations

import re
from typing import Final

_CLASSES: Final[dict[str, tuple[str, ...]]] = {
    "read": (
        "list",
        "show",
        "display",
        "get",
        "fetch",
        "find",
        "give",
        "see",
        "view",
        "print",
        "read",
        "look",
        "tell",
        "lookup",
        "search",
        "check",
        "inspect",
        "describe",
        "summarize",
        "summarise",
        "report",
        "count",
        "compare",
        "query",
        "browse",
        "explain",
        "what",
        "which",
    ),
    "close": ("close", "resolve", "dismiss", "ack", "acknowledge", "archive", "finish", "complete"),
    "open": ("reopen",),
    "delete": ("delete", "remove", "drop", "destroy", "purge", "erase", "wipe", "clear", "rm", "uninstall"),
    "create": ("create", "add", "make", "new", "insert", "register", "file", "post", "submit", "init"),
    "change": (
        "set",
        "update",
        "change",
        "modify",
        "edit",
        "rename",
        "patch",
        "replace",
        "configure",
        "assign",
        "move",
        "tag",
        "label",
        "mark",
        "enable",
        "disable",
        "toggle",
        "bump",
        "increase",
        "decrease",
        "raise",
        "lower",
        "fix",
        "write",
        "save",
        "apply",
    ),
    "revert": ("revert", "undo", "rollback", "restore", "reset"),
    "run": ("run", "execute", "start", "launch", "trigger", "invoke", "call", "build", "test", "compile"),
    "stop": ("stop", "kill", "halt", "pause", "suspend", "cancel", "abort", "terminate", "shutdown"),
    "restart": ("restart", "reboot", "reload", "redeploy", "recycle"),
    "deploy": ("deploy", "release", "ship", "publish", "promote", "push", "merge", "upload"),
    "send": ("send", "email", "notify", "message", "ping", "page", "alert", "reply", "comment", "share"),
    "download": ("download", "pull", "clone", "copy", "export", "backup", "sync"),
    "approve": ("approve", "accept", "allow", "grant", "confirm"),
    "deny": ("deny", "reject", "refuse", "block", "ban", "revoke", "decline"),
}

VERB_CLASS: Final[dict[str, str]] = {verb: name for name, verbs in _CLASSES.items() for verb in verbs}

# Words that carry no task: articles, pronouns, prepositions and politeness.
STOPWORDS: Final = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "it",
        "its",
        "of",
        "for",
        "in",
        "on",
        "at",
        "to",
        "from",
        "by",
        "with",
        "into",
        "onto",
        "about",
        "as",
        "and",
        "or",
        "me",
        "my",
        "mine",
        "us",
        "our",
        "you",
        "your",
        "please",
        "pls",
        "kindly",
        "now",
        "then",
        "also",
        "just",
        "all",
        "any",
        "every",
        "each",
        "some",
        "there",
        "here",
        "is",
        "are",
        "be",
        "was",
        "were",
        "been",
        "do",
        "does",
        "did",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "i",
        "we",
        "they",
        "them",
        "their",
        "his",
        "her",
        "him",
        "she",
        "he",
        "up",
        "out",
        "over",
        "via",
        "per",
    ]
)
# Words whose difference always changes the task, even when everything else agrees.
NEGATIONS: Final = frozenset({"not", "no", "never", "without", "except", "dont", "don't", "nor", "none"})
# Tokens a matcher may add or drop outside the slots: sentence punctuation and politeness.
IGNORABLE: Final = frozenset({".", ",", "!", "?", ";", ":", "please", "pls", "kindly"})

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)


def words(text: str) -> list[str]:
    """The words of ``text``, lower-cased (letters and digits; punctuation splits)."""
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


def verb_class(word: str) -> str | None:
    """The action class of ``word`` (lower-case), or None when it names no action."""
    return VERB_CLASS.get(word) or VERB_CLASS.get(stem(word))


def stem(word: str) -> str:
    """A light stem, enough to let "incidents" meet "incident" and "closed" meet "close"."""
    w = word.lower()
    for suffix, keep in (("ies", "y"), ("sses", "ss"), ("es", "e"), ("s", ""), ("ed", ""), ("ing", "")):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            base = w[: -len(suffix)] + keep
            if suffix == "es" and not base.endswith(("s", "x", "z", "ch", "sh")):
                base = w[:-1]
            if suffix == "ed" and base + "e" in VERB_CLASS:
                base += "e"
            return base
    return w


def content_words(text: str) -> list[str]:
    """The stems of the words that carry the task: no stopwords; verbs stand for their class."""
    out: list[str] = []
    for w in words(text):
        if w in STOPWORDS:
            continue
        cls = verb_class(w)
        out.append(f"<{cls}>" if cls is not None else stem(w))
    return out


def is_action_word(text: str) -> bool:
    """True when ``text`` is one word that names an action (it can never be a parameter)."""
    found = words(text)
    return len(found) == 1 and found[0] == text.lower() and verb_class(found[0]) is not None
