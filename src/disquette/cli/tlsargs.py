"""The TLS options of the command-line tools, named as redis-cli names them.

``--tls`` connects with TLS; ``--cacert``/``--cacertdir`` name the CA that signed the
nodes' certificates (the system's CAs otherwise); ``--cert``/``--key`` the client
certificate a node with ``tls-auth-clients yes`` asks for; ``--insecure`` skips the
check of the node's certificate. Giving any of them but ``--tls`` implies it.
"""

from __future__ import annotations

import argparse
import ssl

from disquette.client.api import tls_context


def add_tls_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``--tls``, ``--cacert``, ``--cacertdir``, ``--cert``, ``--key``, ``--insecure``."""
    p.add_argument("--tls", action="store_true", help="connect with TLS")
    p.add_argument("--cacert", help="CA certificate file that signed the nodes' certificates")
    p.add_argument("--cacertdir", help="directory of trusted CA certificates")
    p.add_argument("--cert", help="client certificate file (tls-auth-clients)")
    p.add_argument("--key", help="private key file of --cert")
    p.add_argument("--insecure", action="store_true", help="do not check the node's certificate")


def ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The client TLS context the options ask for, or None (plaintext)."""
    if not (args.tls or args.cacert or args.cacertdir or args.cert or args.insecure):
        return None
    return tls_context(
        args.cacert, args.cert, args.key, ca_dir=args.cacertdir, insecure=args.insecure
    )
