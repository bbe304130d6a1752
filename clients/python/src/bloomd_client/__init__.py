"""bloomd_client: the reference Python client of bloomd (standard library only).

    from bloomd_client import Client
    with Client.from_url("bloomd://127.0.0.1:8673") as bloomd:
        bloomd.create("clicks", capacity=1_000_000, error=0.001)
        seen = bloomd.checkadd("clicks", ["a", "b", "a"])   # [False, False, True]
"""
from .client import Client, FilterSummary, Role, parse_role, parse_url, parse_url_auth
from .errors import (AuthenticationError, BloomdConnectionError, BloomdError, ClientError, InvalidKey,
                     InvalidName, NotFound, ProtocolError, ServerError, ServerReplyError,
                     UnknownCommand)
from .keys import hashed_key
from .sharding import ShardedClient

__all__ = [
    "AuthenticationError", "BloomdConnectionError", "BloomdError", "Client", "ClientError",
    "FilterSummary", "InvalidKey", "InvalidName", "NotFound", "ProtocolError", "ServerError",
    "Role", "ServerReplyError", "ShardedClient", "UnknownCommand", "hashed_key", "parse_role",
    "parse_url", "parse_url_auth",
]
__version__ = "0.1.0"
