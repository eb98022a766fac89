"""The errors the configuration system reports, with Disque's exact texts.

Three audiences, three exceptions:

* :class:`ConfigFileError` -- a bad configuration file or command-line option.
  Disque prints a fixed banner on stderr and exits with status 1; ``str()`` of
  the exception *is* that banner, byte for byte (``bytes()`` gives the exact
  bytes when the offending line is not valid UTF-8).
  :class:`ConfigOpenError` is the special case of a file that cannot be opened,
  which Disque reports as a log line instead of the banner.
* :class:`ConfigSetError` -- CONFIG SET refused a value; ``message`` is the
  text after ``-ERR `` in the reply.
* :class:`ConfigRewriteError` -- CONFIG REWRITE failed; same convention.
"""

from __future__ import annotations


class LoadError(Exception):
    """Raised by a directive's loader with the reason line of the fatal banner."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ConfigFileError(Exception):
    """A configuration line was rejected; ``str()`` is Disque's fatal banner.

    The banner is what ``loadServerConfigFromString`` prints before exiting::

        \\n*** FATAL CONFIG FILE ERROR ***\\n
        Reading the configuration file, at line <n>\\n
        >>> '<the trimmed line>'\\n
        <reason>\\n

    Beyond Disque, when the server knows where the line came from, the second line
    says so (``where``): ``Reading the command line, at option --maxmemory``, or
    ``Reading the configuration file /etc/disque.conf, at line 4`` (Disque's number
    alone counts the file's lines and the options after them as one text).
    """

    def __init__(self, line_number: int, line: bytes, reason: str) -> None:
        super().__init__(reason)
        self.line_number = line_number
        self.line = line
        self.reason = reason
        self.where: str | None = None

    def __bytes__(self) -> bytes:
        where = self.where or f"Reading the configuration file, at line {self.line_number}"
        return (b"\n*** FATAL CONFIG FILE ERROR ***\n%s\n>>> '%s'\n%s\n") % (
            where.encode("utf-8", "surrogateescape"),
            self.line,
            self.reason.encode("utf-8", "surrogateescape"),
        )

    def __str__(self) -> str:
        return bytes(self).decode("utf-8", "backslashreplace")


class ConfigOpenError(ConfigFileError):
    """A configuration file (or ``include``) could not be opened.

    Disque logs ``Fatal error, can't open config file '<path>'`` at warning
    level and exits with status 1; ``str()`` is that message (no newline).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        message = f"Fatal error, can't open config file '{path}'"
        super().__init__(0, b"", message)

    def __bytes__(self) -> bytes:
        return self.reason.encode("utf-8", "surrogateescape")

    def __str__(self) -> str:
        return self.reason.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class ConfigSetError(Exception):
    """CONFIG SET failed; ``message`` is the error text without the ``-ERR `` prefix.

    The text can carry undecodable bytes from the client (as surrogate
    escapes); :meth:`to_bytes` gives the exact bytes to put in the reply.
    The caller still applies the generic-error rule (``\\r``/``\\n`` become spaces).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_bytes(self) -> bytes:
        return self.message.encode("utf-8", "surrogateescape")


class ConfigRewriteError(Exception):
    """CONFIG REWRITE failed; ``message`` is the error text without ``-ERR ``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_bytes(self) -> bytes:
        return self.message.encode("utf-8", "surrogateescape")
