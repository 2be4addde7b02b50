"""What may be shown of a configured value: a URL without the credentials it may carry
(``https://user:pass@host/`` shows as ``https://host/``), for links, logs, step summaries, the
timeline and error messages alike."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s]*@")


def url_without_credentials(text: str) -> str:
    """``text`` (a URL, or a message quoting URLs) with every ``user:password@`` removed."""
    return _USERINFO.sub(r"\g<scheme>", text)
