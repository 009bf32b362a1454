"""The service's URL: ``https`` for any host but this machine, and never shown with its userinfo (issue 16).

The service's answers are pre-approved tool calls and the code that computes their arguments, and every
request carries the bearer token. Over plain ``http`` to another host, anyone on the path reads the token
and can serve the scenarios, so ``insecure_reason`` refuses it; loopback (``localhost``, ``127.0.0.0/8``,
``::1``) is this machine, where plain ``http`` is what a local service or a test's fake speaks.

A URL may carry ``user:password@``; ``display_url`` and ``hide_userinfo`` keep it out of everything bir
prints or logs. Standard library only.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final
from urllib.parse import urlsplit

HIDDEN: Final = "***"
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]{0,20}://)[^/\s@\"'<>]{1,512}@")


def is_loopback_host(host: str | None) -> bool:
    """True for ``localhost`` and the loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if not host:
        return False
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def insecure_reason(url: str) -> str | None:
    """Why bir will not talk to the service at ``url``, or None: ``https``, or ``http`` to this machine."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return f"{display_url(url)[:200]} is not a URL bir can use"
    if parts.scheme == "https":
        return None
    if parts.scheme == "http" and is_loopback_host(host):
        return None
    return (
        f"{display_url(url)[:200]} is not https: the service's token and its pre-approved tool calls would cross "
        "the network in clear. Use https:// (plain http:// only to this machine: localhost, 127.0.0.1, ::1)"
    )


def display_url(url: str) -> str:
    """``url`` as bir shows it: any ``user:password@`` replaced by ``***@``."""
    return hide_userinfo(url)


def hide_userinfo(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``."""
    return _USERINFO.sub(rf"\g<scheme>{HIDDEN}@", text)
