"""Throwaway certificate authorities and certificates for the TLS tests (trustme).

Every test run makes its own CAs: nothing is committed, nothing outlives the run.
:class:`Pki` writes a CA's certificate and certificates it issues (for 127.0.0.1 and
localhost, fit for a server and a client) as PEM files in a folder, and gives the
server directives and the client options that use them.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography import x509


@dataclass(frozen=True)
class Identity:
    """A certificate and its key, as files."""

    cert: Path
    key: Path

    def serial(self) -> int:
        """The certificate's serial number (to tell two certificates apart)."""
        return x509.load_pem_x509_certificate(self.cert.read_bytes()).serial_number


class Pki:
    """One throwaway CA and the files of what it issues, under ``folder``."""

    def __init__(self, folder: Path, name: str = "ca") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.name = name
        self.ca = trustme.CA()
        self.ca_file = folder / f"{name}.crt"
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    def issue(self, name: str, cert: Path | None = None, key: Path | None = None) -> Identity:
        """A new certificate and key for 127.0.0.1/localhost, written to ``cert``/``key``
        (by default ``<ca>-<name>.crt``/``.key``; given paths are overwritten in place)."""
        leaf = self.ca.issue_cert("127.0.0.1", "localhost", common_name=name)
        cert = cert or self.folder / f"{self.name}-{name}.crt"
        key = key or self.folder / f"{self.name}-{name}.key"
        cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        leaf.private_key_pem.write_to_path(str(key))
        return Identity(cert, key)

    def server_args(self, identity: Identity, *more: str) -> list[str]:
        """Command-line directives for a server with ``identity``, trusting this CA."""
        return [
            "--tls-cert-file", str(identity.cert),
            "--tls-key-file", str(identity.key),
            "--tls-ca-cert-file", str(self.ca_file),
            *more,
        ]  # fmt: skip

    def client_context(self, identity: Identity | None = None) -> ssl.SSLContext:
        """A client context trusting this CA, showing ``identity`` if given."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if identity is not None:
            context.load_cert_chain(str(identity.cert), str(identity.key))
        return context
