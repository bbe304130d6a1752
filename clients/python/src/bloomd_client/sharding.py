"""ShardedClient: one logical set of filters spread over several bloomd servers.

Each key lives on exactly one server, chosen by rendezvous (highest random weight)
hashing of the key (its encoded bytes, after hash_keys) against each server's
"host:port": the server with the highest score mix64(blake2b64(key) ^ blake2b64(address))
wins. All keys of a call are validated before anything is sent. Every filter exists on every
server, each holding the part of it for its keys, so UNION and INTERSECT run per server.

When the server list changes: adding a server moves about 1/(n+1) of the keys, all of
them to the new server; removing one moves only that server's keys, spread over the
rest; reordering the list moves nothing. A moved key is unknown on its new server, so
check() answers False for it (a false negative) until it is added again there. To
change the fleet without losing history: create() the filters on the new server, then
for a while ask both the old and the new ShardedClient and treat a key as seen if either
says so, while adding to the new one only; drop the old layout when the keys of interest
have been seen again (or keep the old servers read-only until their data ages out).
"""
import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Sequence, Tuple, TypeVar, Union, overload

from .client import Client, FilterSummary, Keys, Value, _key_list
from .errors import NotFound
from .keys import Key

T = TypeVar("T")
_MASK = (1 << 64) - 1


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _mix64(x: int) -> int:
    """splitmix64's finalizer: a bijection on 64-bit ints with good avalanche."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class Rendezvous:
    """Maps keys to one of the given server ids by highest random weight."""

    def __init__(self, ids: Sequence[str]) -> None:
        if not ids:
            raise ValueError("need at least one server")
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate server in %r" % (list(ids),))
        self._seeds = [_hash64(i.encode("utf-8")) for i in ids]

    def pick(self, key: bytes) -> int:
        """Index of the server that owns the key."""
        h = _hash64(key)
        best, best_score = 0, -1
        for i, seed in enumerate(self._seeds):
            score = _mix64(h ^ seed)
            if score > best_score:
                best, best_score = i, score
        return best


class ShardedClient:
    """Client's interface over several servers ("bloomd://host:port" urls); options are
    passed to each server's Client. Calls run on all involved servers in parallel."""

    def __init__(self, urls: Sequence[str], **options: Any) -> None:
        self.shards = [Client.from_url(u, **options) for u in urls]
        self._router = Rendezvous([c.address for c in self.shards])
        self._pool = ThreadPoolExecutor(max_workers=len(self.shards),
                                        thread_name_prefix="bloomd-shard")

    def shard_for(self, key: Key) -> Client:
        """The server that owns a key."""
        return self.shards[self._router.pick(self.shards[0].encode_keys([key])[0])]

    def _run(self, jobs: List[Tuple[Client, Callable[[Client], T]]]) -> List[T]:
        """Runs each job(client) in parallel; waits for all, then raises the first
        failure or returns the results in job order."""
        futures = [self._pool.submit(job, client) for client, job in jobs]
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error
        return [f.result() for f in futures]

    def _each(self, job: Callable[[Client], T]) -> List[T]:
        return self._run([(c, job) for c in self.shards])

    def _split(self, keys: Iterable[Key]) -> Tuple[int, Dict[int, Tuple[List[int], List[bytes]]]]:
        """(number of keys, {shard: (input positions, encoded keys)}); raises InvalidKey
        before anything is sent."""
        encoded = self.shards[0].encode_keys(keys)
        parts: Dict[int, Tuple[List[int], List[bytes]]] = {}
        pick = self._router.pick
        for pos, key in enumerate(encoded):
            positions, chunk = parts.setdefault(pick(key), ([], []))
            positions.append(pos)
            chunk.append(key)
        return len(encoded), parts

    def _bits(self, name: str, keys: Keys, add: bool) -> Union[bool, List[bool]]:
        single, many = _key_list(keys)
        total, parts = self._split(many)
        command = b"CHECKADD" if add else b"CHECK"
        shards = list(parts)

        def job(shard: int) -> Callable[[Client], List[bool]]:
            chunk = parts[shard][1]
            return lambda c: c._bits_encoded(command, name, chunk)

        answers = self._run([(self.shards[s], job(s)) for s in shards])
        results = [False] * total
        for shard, bits in zip(shards, answers):
            for pos, bit in zip(parts[shard][0], bits):
                results[pos] = bit
        return results[0] if single else results

    def create(self, name: str, **params: Any) -> bool:
        """Creates the filter on every server (Client.create's parameters); True if it
        was created on at least one. Call it again after adding a server."""
        return any(self._each(lambda c: c.create(name, **params)))

    def add(self, name: str, keys: Keys) -> int:
        _, parts = self._split(_key_list(keys)[1])

        def job(chunk: List[bytes]) -> Callable[[Client], int]:
            return lambda c: c._add_encoded(name, chunk)

        return sum(self._run([(self.shards[s], job(ks)) for s, (_, ks) in parts.items()]))

    def delete(self, name: str, keys: Keys) -> int:
        """Client.delete() on the server of each key; the keys removed in all."""
        _, parts = self._split(_key_list(keys)[1])

        def job(chunk: List[bytes]) -> Callable[[Client], int]:
            return lambda c: c._delete_encoded(name, chunk)

        return sum(self._run([(self.shards[s], job(ks)) for s, (_, ks) in parts.items()]))

    @overload  # a str is also an Iterable[str]: the single-key form wins
    def check(self, name: str, keys: Key) -> bool: ...  # type: ignore[misc]
    @overload
    def check(self, name: str, keys: Iterable[Key]) -> List[bool]: ...

    def check(self, name: str, keys: Keys) -> Union[bool, List[bool]]:
        return self._bits(name, keys, add=False)

    @overload  # a str is also an Iterable[str]: the single-key form wins
    def checkadd(self, name: str, keys: Key) -> bool: ...  # type: ignore[misc]
    @overload
    def checkadd(self, name: str, keys: Iterable[Key]) -> List[bool]: ...

    def checkadd(self, name: str, keys: Keys) -> Union[bool, List[bool]]:
        return self._bits(name, keys, add=True)

    def union(self, dst: str, *srcs: str) -> None:
        self._each(lambda c: c.union(dst, *srcs))

    def intersect(self, dst: str, *srcs: str) -> None:
        """Per server. Each server's part grows on its own, so one may refuse (ClientError,
        grown filters) while the others have intersected."""
        self._each(lambda c: c.intersect(dst, *srcs))

    def clear(self, name: str) -> None:
        self._each(lambda c: c.clear(name))

    def flush(self, name: Union[str, None] = None) -> None:
        self._each(lambda c: c.flush(name))

    def drop(self, name: str) -> None:
        """Drops the filter everywhere; NotFound only if no server had it."""
        def job(c: Client) -> bool:
            try:
                c.drop(name)
                return True
            except NotFound:
                return False
        if not any(self._each(job)):
            raise NotFound("NOT_FOUND", "")

    def info(self, name: str) -> Dict[str, Dict[str, Value]]:
        """INFO of every server's part of the filter, by "host:port"."""
        return dict(zip(self._addresses(), self._each(lambda c: c.info(name))))

    def list(self, prefix: str = "") -> Dict[str, List[FilterSummary]]:
        return dict(zip(self._addresses(), self._each(lambda c: c.list(prefix))))

    def stats(self) -> Dict[str, Dict[str, Value]]:
        return dict(zip(self._addresses(), self._each(lambda c: c.stats())))

    def version(self) -> Dict[str, str]:
        return dict(zip(self._addresses(), self._each(lambda c: c.version())))

    def _addresses(self) -> List[str]:
        return [c.address for c in self.shards]

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for c in self.shards:
            c.close()

    def __enter__(self) -> "ShardedClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
