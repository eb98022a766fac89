"""Property tests of the ``tls-*`` directives' values (config/tls.py, server/tls.py).

* A ``tls-*`` line with random words (protocol names in any case, OpenSSL cipher words,
  TLS 1.3 suite names, junk) loads into a normalised value or fails with the config
  file's banner, and what loads survives CONFIG REWRITE and a reload unchanged.
* CONFIG SET with the same values stores the same thing the file would, or refuses
  with ``Invalid argument``, never anything else.
* A TLS context built from whatever loaded (with real certificates of a throwaway CA)
  is made, or refused with a :class:`TlsConfigError` that says why: never a crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from disquette.config import (
    Config,
    ConfigFileError,
    ConfigSetError,
    config_set,
    load_config_text,
    rewrite_config_text,
)
from disquette.config.cstring import sds_repr
from disquette.config.tls import AUTH_CLIENTS, PROTOCOLS, TLS13_SUITES
from disquette.server.tls import TlsConfigError, bus_client_context, server_context
from tests.support.fuzz import fuzz_settings
from tests.support.tls import Pki

FUZZ = fuzz_settings(400, HealthCheck.function_scoped_fixture)

CIPHER_WORDS = [
    "HIGH", "!aNULL", "!MD5", "ECDHE+AESGCM", "ECDHE-RSA-AES256-GCM-SHA384", "DEFAULT",
    "@SECLEVEL=1", "RC4", "NULL", "eNULL", "ALL", "-ALL", "+kRSA", "NOPE", "", "::",
]  # fmt: skip
JUNK = st.text(max_size=8).map(lambda s: s.encode("utf-8", "surrogateescape"))
PROTOCOL_WORDS = st.sampled_from(
    [*PROTOCOLS, *(p.lower() for p in PROTOCOLS), *(p.upper() for p in PROTOCOLS), "SSLv3", "TLS"]
)


def joined(words: st.SearchStrategy[str], sep: str) -> st.SearchStrategy[bytes]:
    return st.lists(words, max_size=4).map(lambda ws: sep.join(ws).encode())


VALUES: dict[str, st.SearchStrategy[bytes]] = {
    "tls-protocols": st.one_of(joined(PROTOCOL_WORDS, " "), JUNK),
    "tls-ciphers": st.one_of(joined(st.sampled_from(CIPHER_WORDS), ":"), JUNK),
    "tls-ciphersuites": st.one_of(
        joined(st.sampled_from([*TLS13_SUITES, "TLS_FAKE", ""]), ":"), JUNK
    ),
    "tls-auth-clients": st.one_of(st.sampled_from([w.encode() for w in AUTH_CLIENTS]), JUNK),
    "tls-prefer-server-ciphers": st.sampled_from([b"yes", b"no", b"maybe"]),
    "tls-session-caching": st.sampled_from([b"yes", b"NO", b""]),
    "tls-port": st.integers(-5, 70000).map(lambda i: str(i).encode()),
}
SETTINGS = st.lists(
    st.sampled_from(sorted(VALUES)).flatmap(lambda name: st.tuples(st.just(name), VALUES[name])),
    max_size=5,
)


@pytest.fixture(scope="module")
def identity_lines(tmp_path_factory) -> bytes:
    pki = Pki(tmp_path_factory.mktemp("pki"))
    node = pki.issue("node")
    return b"tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n" % (
        sds_repr(str(node.cert).encode()),
        sds_repr(str(node.key).encode()),
        sds_repr(str(pki.ca_file).encode()),
    )


def text_of(settings_: list[tuple[str, bytes]]) -> bytes:
    return b"".join(b"%s %s\n" % (name.encode(), sds_repr(value)) for name, value in settings_)


@FUZZ
@given(settings_=SETTINGS)
def test_tls_lines_load_normalised_and_survive_rewrite(settings_, identity_lines: bytes):
    text = identity_lines + text_of(settings_)
    try:
        config = load_config_text(text)
    except ConfigFileError as e:
        assert str(e)
        return
    assert config.tls_auth_clients in AUTH_CLIENTS
    assert 0 <= config.tls_port <= 65535
    if config.tls_protocols is not None:
        assert all(word in PROTOCOLS for word in config.tls_protocols.split())
    rewritten = rewrite_config_text(text, config)
    assert load_config_text(rewritten) == config
    # The same values through CONFIG SET are stored alike (tls-port needs a restart).
    live = Config()
    for name, value in settings_:
        if name == "tls-port":
            with pytest.raises(ConfigSetError, match="Unsupported CONFIG parameter"):
                config_set(live, name.encode(), value)
        else:
            config_set(live, name.encode(), value)
    for name, _ in settings_:
        if name != "tls-port":
            attr = name.replace("-", "_")
            assert getattr(live, attr) == getattr(config, attr), name


@FUZZ
@given(name=st.sampled_from(sorted(VALUES)), value=st.binary(max_size=40))
def test_config_set_refuses_bad_values_in_redis_words(name: str, value: bytes):
    live = Config()
    try:
        config_set(live, name.encode(), value)
    except ConfigSetError as e:
        assert e.message.startswith(("Invalid argument", "Unsupported CONFIG parameter"))


@FUZZ
@given(settings_=SETTINGS)
def test_contexts_are_built_or_refused_with_a_reason(settings_, identity_lines: bytes):
    try:
        config = load_config_text(identity_lines + text_of(settings_))
    except ConfigFileError:
        return
    for build in (server_context, bus_client_context):
        try:
            build(config)
        except TlsConfigError as e:
            assert str(e)


def test_unreadable_files_are_named(tmp_path: Path):
    config = load_config_text(f"tls-cert-file {tmp_path / 'none.crt'}\n")
    with pytest.raises(TlsConfigError, match=r"Failed to load certificate: .*none\.crt"):
        server_context(config)
