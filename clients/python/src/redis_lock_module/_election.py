"""Leader election on one lock, as etcd's Campaign / Proclaim / Resign / Leader / Observe.

    election = Election(r, "service:leader", ttl=30, lock_delay=5)
    with election.campaign(b"10.0.0.7:8080") as leadership:   # blocks until elected
        serve(term=leadership.term)                           # send the term with writes
    for leader in election.observe():                         # every new leader
        print(leader)                                         # Leader(term, value) or None

Candidates queue for the lock (first come, first elected); the leader's lock is bound to
its connections with a lock-delay (`SESSION`) and extended by a watchdog; its value is
published with `VALUE`; followers wait in `LOCK.WATCH`, never polling.
"""

from __future__ import annotations

import time
from typing import Any, Iterator, List, NamedTuple, Optional, Tuple

from redis.exceptions import ConnectionError, LockNotOwnedError, ResponseError, TimeoutError

from . import _protocol
from ._lock import Lock
from ._protocol import Number, Token
from .exceptions import LockLostError, lock_error

__all__ = ["Election", "Leadership", "Leader"]

#: How long one LOCK.WATCH of `observe` waits before asking again, in seconds.
OBSERVE_ROUND = 30.0
#: The longest pause between two tries to reach the server again, in seconds.
MOST_BACKOFF = 2.0


class Leader(NamedTuple):
    """A leader as followers see it: its term (the fence of its grant; terms only grow)
    and the value it published (bytes, or None)."""
    term: int
    value: Optional[bytes]


def leader_from_info(info: Any) -> Optional[Leader]:
    """The leader in a `LOCK.INFO` reply (None when nobody holds the key)."""
    fields = _protocol.info_fields(info)
    if fields is None:
        return None
    value = _raw_value(info)
    return Leader(int(fields["fence"]), value)


def _raw_value(info: Any) -> Optional[bytes]:
    """The `value` field of a LOCK.INFO reply, as bytes (the generic reader decodes)."""
    pairs = info.items() if isinstance(info, dict) else zip(info[::2], info[1::2])
    for name, value in pairs:
        if (name.decode() if isinstance(name, bytes) else str(name)) == "value":
            return None if value is None else _protocol.as_bytes(value)
    return None


def watched(reply: Any) -> Tuple[bool, Optional[Leader]]:
    """A `LOCK.WATCH` reply: whether it reports a state (not a timeout), and the leader
    it names (None for nobody)."""
    if reply is None:
        return False, None
    term, value = reply
    if int(term) == 0:
        return True, None
    return True, Leader(int(term), None if value is None else _protocol.as_bytes(value))


def observe_round(redis: Any) -> float:
    """One LOCK.WATCH's wait: 30 s, or less than the client's socket timeout."""
    kwargs = getattr(getattr(redis, "connection_pool", None), "connection_kwargs", {}) or {}
    socket_timeout = kwargs.get("socket_timeout")
    if socket_timeout:
        return max(0.001, min(OBSERVE_ROUND, float(socket_timeout) / 2))
    return OBSERVE_ROUND


# The error replies `observe` rides out: what a failover, a restart or a slot move
# answers a watcher (docs/election.md). Every package rides out the same.
RIDDEN_OUT = ("UNBLOCKED", "MOVED", "ASK", "READONLY", "LOADING", "MASTERDOWN", "TRYAGAIN",
              "CLUSTERDOWN")


def retryable(error: Exception) -> bool:
    """Whether `observe` reconnects and asks again after `error`: a lost, refused or
    timed-out connection, or a reply of RIDDEN_OUT. Any other error ends it."""
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    code = str(error).split(" ", 1)[0]
    return isinstance(error, ResponseError) and code in RIDDEN_OUT


def backoff(last: float) -> float:
    return min(MOST_BACKOFF, max(0.1, last * 2))


def lost_on_proclaim(name: Any) -> LockLostError:
    return lock_error(LockLostError, "The leadership was gone when it proclaimed", str(name))


class _LeaderLock(Lock):
    """A `Lock` whose every acquire publishes `value`."""

    value: bytes = b""

    def _acquire_args(self, token: bytes, wait_ms: Optional[int] = None) -> List[Any]:
        return [*super()._acquire_args(token, wait_ms), "VALUE", self.value]


def encode_value(value: Token) -> bytes:
    encoded = _protocol.as_bytes(value)
    if len(encoded) > 4096:
        raise ValueError(f"value must be 0 to 4096 bytes, not {len(encoded)}")
    return encoded


class Leadership:
    """The leadership a campaign won: `term` to send with every write, `proclaim` a new
    value, `resign` (also on leaving its `with` block). `lost` turns true when the
    watchdog finds the term gone; stop acting as the leader then."""

    def __init__(self, lock: _LeaderLock):
        self._lock = lock
        self.term: int = lock.fence or 0

    @property
    def lost(self) -> bool:
        return self._lock.lost

    def check(self) -> None:
        """Raises LockLostError once the leadership is known to be lost."""
        self._lock.check()

    def proclaim(self, value: Token) -> None:
        """Publishes `value` in place of the last one, same term; LockLostError if the
        leadership is gone."""
        self._lock.value = encode_value(value)
        redis, token = self._lock.redis, self._lock.token
        if token is None:
            raise lost_on_proclaim(self._lock.name)
        granted = _protocol.grant(redis.execute_command(*self._lock._acquire_args(token)))
        if granted is None or granted[1] != self.term:
            if granted is not None:
                # The term had ended and the key was free: this took it anew. Give it back.
                redis.execute_command("LOCK.RELEASE", self._lock.name, token)
            raise lost_on_proclaim(self._lock.name)

    def resign(self) -> bool:
        """Resigns: the next candidate is elected at once. False if it was already lost."""
        try:
            self._lock.release()
        except LockNotOwnedError:
            return False
        return True

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.resign()


class Election:
    """The election on `name`: a leader holds the lock `ttl` seconds at a time, extended
    every third of it while it lives; a leader whose connection closes is replaced
    `lock_delay` seconds later."""

    def __init__(self, redis: Any, name: Any, ttl: Number = 30, lock_delay: Number = 5):
        self.redis = redis
        self.name = name
        self.ttl = ttl
        self.lock_delay = lock_delay
        _protocol.to_ms(ttl, "ttl")
        _protocol.to_ms(lock_delay, "lock_delay", minimum=0)

    def _lock(self, value: Token, timeout: Optional[Number]) -> _LeaderLock:
        lock = _LeaderLock(self.redis, self.name, timeout=self.ttl, blocking_timeout=timeout,
                           session=self.lock_delay, watchdog=True, thread_local=False)
        lock.value = encode_value(value)
        return lock

    def campaign(self, value: Token, timeout: Optional[Number] = None) -> Optional[Leadership]:
        """Blocks until elected (first come, first elected) and returns the Leadership;
        None if `timeout` seconds passed first (None: no limit)."""
        lock = self._lock(value, timeout)
        if not lock.acquire(blocking=True, blocking_timeout=timeout):
            return None
        return Leadership(lock)

    def leader(self) -> Optional[Leader]:
        """The leader now, None when nobody leads (`LOCK.INFO`)."""
        return leader_from_info(self.redis.execute_command("LOCK.INFO", self.name))

    def observe(self, term: int = 0) -> Iterator[Optional[Leader]]:
        """Every change of leader after `term` (0: nobody, so the first item is the
        leader now, if any), as it happens: a Leader, or None when nobody leads. It
        re-asks `LOCK.WATCH` with the last term seen, so no change that lasted is
        missed, and survives a lost connection or a failover by asking again."""
        last, pause = term, 0.0
        round_s = observe_round(self.redis)
        while True:
            try:
                reply = self.redis.execute_command("LOCK.WATCH", self.name, last,
                                                   max(1, int(round_s * 1000)))
            except Exception as error:  # noqa: BLE001 - only what `retryable` names
                if not retryable(error):
                    raise
                pause = backoff(pause)
                time.sleep(pause)
                continue
            pause = 0.0
            changed, seen = watched(reply)
            if not changed:
                continue  # the round passed with no change
            last = 0 if seen is None else seen.term
            yield seen
