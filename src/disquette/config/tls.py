"""The values of the ``tls-*`` directives, checked as text: protocols, ciphers, suites.

The TLS directives are Redis 6+'s (``tls-port``, ``tls-cert-file``, ``tls-protocols``,
...): :mod:`disquette.config.table` holds their rows and uses these functions for the
values that have a syntax of their own, so that a typo is refused where it is written
(the config file's banner, CONFIG SET's ``Invalid argument``) rather than when the
server builds its TLS context. Whether the files exist and hold a certificate and a
key that match is only known when the context is built (server/tls.py): at start-up
(the server refuses to start, naming the file) and on CONFIG SET (refused, the old
context stays). Nothing here opens a file.
"""

from __future__ import annotations

import ssl

#: The protocol names ``tls-protocols`` accepts (Redis's), oldest first.
PROTOCOLS: tuple[str, ...] = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
#: Redis's text for a bad ``tls-protocols``.
PROTOCOLS_ERROR = (
    "Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' "
    "and 'TLSv1.3'."
)
#: ``tls-auth-clients``: a client certificate is required, not asked for, or checked if sent.
AUTH_CLIENTS: tuple[str, ...] = ("yes", "no", "optional")
AUTH_CLIENTS_ERROR = "argument(s) must be one of the following: yes, no, optional"
#: The TLS 1.3 cipher suites OpenSSL knows (``tls-ciphersuites``, colon-separated).
TLS13_SUITES: tuple[str, ...] = (
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_128_CCM_SHA256",
    "TLS_AES_128_CCM_8_SHA256",
)


def parse_protocols(text: str) -> str | None:
    """The normalised ``tls-protocols`` (``"TLSv1.2 TLSv1.3"``; ``""``: the default,
    TLS 1.2 and 1.3), or ``None`` when a word is not a protocol name (any case)."""
    by_lower = {name.lower(): name for name in PROTOCOLS}
    words = text.split()
    if not all(word.lower() in by_lower for word in words):
        return None
    chosen = {by_lower[word.lower()] for word in words}
    return " ".join(name for name in PROTOCOLS if name in chosen)


def protocol_range(text: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """The lowest and highest version a normalised ``tls-protocols`` allows (a gap
    between two names is allowed too: OpenSSL takes a range)."""
    versions = {
        "TLSv1": ssl.TLSVersion.TLSv1,
        "TLSv1.1": ssl.TLSVersion.TLSv1_1,
        "TLSv1.2": ssl.TLSVersion.TLSv1_2,
        "TLSv1.3": ssl.TLSVersion.TLSv1_3,
    }
    names = text.split() or ["TLSv1.2", "TLSv1.3"]
    return versions[names[0]], versions[names[-1]]


def ciphers_error(text: str) -> str | None:
    """Why OpenSSL refuses ``text`` as a TLS 1.2 cipher list (``tls-ciphers``), or None."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(text)
    except (ssl.SSLError, ValueError):  # (UnicodeEncodeError: undecodable bytes)
        return f"Failed to configure ciphers: no cipher matches '{text}'"
    return None


def ciphersuites_error(text: str) -> str | None:
    """Why ``text`` is not a TLS 1.3 suite list (``tls-ciphersuites``), or None."""
    names = text.split(":")
    if not text or not all(name in TLS13_SUITES for name in names):
        return f"Failed to configure ciphersuites: use names among {':'.join(TLS13_SUITES)}"
    return None
