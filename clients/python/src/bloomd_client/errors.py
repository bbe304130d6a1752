"""Exceptions of bloomd_client.

Replies the server sends as errors become ServerReplyError subclasses carrying the
server's text; local failures (bad keys, lost connections, garbled replies) have their
own classes. Everything derives from BloomdError.
"""
from typing import Optional


class BloomdError(Exception):
    """Base class of every error this package raises."""


class ServerReplyError(BloomdError):
    """The server answered with an error line; `reply` is that line, `message` its reason."""

    def __init__(self, reply: str, message: str = "") -> None:
        super().__init__(reply)
        self.reply = reply
        self.message = message


class NotFound(ServerReplyError):
    """NOT_FOUND: the named filter does not exist."""


class ClientError(ServerReplyError):
    """CLIENT_ERROR <why>: the server refused the request's arguments."""


class UnknownCommand(ClientError):
    """ERROR: the server does not know the command (an older server, or a bug here)."""


class AuthenticationError(ClientError):
    """The server refused AUTH (wrong token, or none configured there). Not retried."""


class ServerError(ServerReplyError):
    """SERVER_ERROR <why>: the server failed (out of memory, disk)."""


class ProtocolError(BloomdError):
    """The server sent a reply this client cannot understand."""


class BloomdConnectionError(BloomdError):
    """The server could not be reached, or the connection broke and the request was not
    retried (retries exhausted, or a CHECKADD that may already have been applied)."""


class InvalidKey(BloomdError, ValueError):
    """A key the protocol cannot carry (empty, space, tab, CR, LF, NUL, or too long)."""


class InvalidName(BloomdError, ValueError):
    """A filter name outside 1-128 bytes of [A-Za-z0-9._-], or starting with '.'."""


def error_from_reply(line: bytes) -> Optional[ServerReplyError]:
    """Returns the exception for an error reply line, or None for any other line."""
    text = line.decode("utf-8", "replace")
    word, _, why = text.partition(" ")
    if word == "NOT_FOUND":
        return NotFound(text, why)
    if word == "CLIENT_ERROR":
        return ClientError(text, why)
    if word == "SERVER_ERROR":
        return ServerError(text, why)
    if word == "ERROR":
        return UnknownCommand(text, why)
    return None
