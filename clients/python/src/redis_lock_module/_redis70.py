"""Where the server cannot hold a grant's reply for its replicas (Redis 7.0, which
refuses `REPLICAS AUTO`; or a module before 0.3.0, which knows no `REPLICAS`): the
package works out the replicas itself and sends its own `WAIT` (docs/clients.md,
"Failover-safe by default"). Entered only from `_replicas`, after such a refusal.

`replicas="auto"` asks for 1 when the master has a replica online, and for nothing on a
master without one. What a connection learned of its master (`ROLE`, or `WAIT 0 0` for
a user whose ACL denies `ROLE`) is forgotten when it connects again (a failover, a
reconnect), after an error or a shortfall, and after `RELEARN_SECONDS`. A master that
lists fewer replicas than before is taken at its former count for `HOLD_SECONDS` after
its last drop (a deposed master loses its replicas just before it is demoted): the rule
the server's own `auto` keeps where it can wait. An explicit `n` asks for `n`, and a
master with fewer replicas online refuses at once. A grant too few replicas
acknowledged is released at once by its token.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from redis.exceptions import ResponseError

from . import _replicas

# How long what a connection learned of its master's replicas is trusted.
RELEARN_SECONDS = 5.0
# How long a master that lists fewer replicas than before is taken at its former count:
# a deposed master whose partition healed drops its replicas just before Sentinel (or
# the cluster) makes it a replica, and its grants in between must not count unwaited.
HOLD_SECONDS = 15.0
_ATTRIBUTE = "_redis_lock_replicas"
_FORGETTER = "_redis_lock_forgetter"


# What a connection learned of its master.

class _Learned:
    """How many replicas a connection's master had online, and when that was learned."""

    def __init__(self, online: int):
        self.online = online
        self.at = time.monotonic()


class _Forgetter:
    """A connection's connect callback, registered once and kept on the connection: a
    new connection (a reconnect, a failover's new master) learns again. redis-py keeps
    connect callbacks as weak references to bound methods (and before 4.3 calls a dead
    one), so the method's object must live as long as the connection."""

    def forget(self, connection: Any) -> None:
        forget(connection)


def known(connection: Any) -> Optional[int]:
    learned: Optional[_Learned] = getattr(connection, _ATTRIBUTE, None)
    if learned is None or time.monotonic() - learned.at > RELEARN_SECONDS:
        return None
    return learned.online


def remember(connection: Any, online: int) -> int:
    """Keeps what `connection` learned; returns the count to go by (`_held_count`)."""
    learned = _Learned(_held_count(_replicas._address(connection), online))
    setattr(connection, _ATTRIBUTE, learned)
    if getattr(connection, _FORGETTER, None) is None:
        forgetter = _Forgetter()
        setattr(connection, _FORGETTER, forgetter)
        register = getattr(connection, "register_connect_callback", None)
        if register is not None:
            register(forgetter.forget)
    return learned.online


class _Seen:
    """The most replicas a server was seen with, the count it showed last, and since when
    it has shown fewer (restarted at each further drop)."""

    def __init__(self, online: int):
        self.online = online
        self.last = online
        self.fewer_since: Optional[float] = None


_SEEN: Dict[Any, _Seen] = {}


def _held_count(address: Any, online: int) -> int:
    """`online`, unless the server at `address` had more replicas and dropped to fewer
    less than HOLD_SECONDS ago (counted from its last drop: a count that falls again, say
    from 1 to 0 after 2 to 1, starts the hold afresh): then that many (a grant waits for
    one, as before the drop)."""
    seen = _SEEN.get(address)
    if seen is None or online >= seen.online:
        _SEEN[address] = _Seen(online)
        return online
    now = time.monotonic()
    if seen.fewer_since is None or online < seen.last:
        seen.fewer_since = now
    seen.last = online
    if now - seen.fewer_since < HOLD_SECONDS:
        return seen.online
    _SEEN[address] = _Seen(online)
    return online


def forget(connection: Any) -> None:
    if getattr(connection, _ATTRIBUTE, None) is not None:
        setattr(connection, _ATTRIBUTE, None)


def online_from(reply: Any) -> int:
    """The replicas online in a `ROLE` reply (a master's third element lists them; a
    replica has none), or in a `WAIT 0 0` answer."""
    if isinstance(reply, int):
        return reply
    role = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
    return len(reply[2]) if role == "master" and len(reply) > 2 else 0


def refused_role(error: ResponseError) -> bool:
    """`ROLE` denied by the user's ACL: `WAIT 0 0` (in `@connection`, as `WAIT`) counts the
    replicas that have this connection's writes instead."""
    return str(error).startswith("NOPERM")


def online(connection: Any) -> int:
    """The replicas the connection's master has online, learned now if not known."""
    count = known(connection)
    if count is not None:
        return count
    (reply,) = _replicas.exchange(connection, [["ROLE"]])
    if isinstance(reply, ResponseError):
        if not refused_role(reply):
            raise reply
        (reply,) = _replicas.exchange(connection, [["WAIT", 0, 0]])
        if isinstance(reply, ResponseError):
            raise reply
    return remember(connection, online_from(reply))


async def async_online(connection: Any) -> int:
    count = known(connection)
    if count is not None:
        return count
    (reply,) = await _replicas.async_exchange(connection, [["ROLE"]])
    if isinstance(reply, ResponseError):
        if not refused_role(reply):
            raise reply
        (reply,) = await _replicas.async_exchange(connection, [["WAIT", 0, 0]])
        if isinstance(reply, ResponseError):
            raise reply
    return remember(connection, online_from(reply))


def replicated(connection: Any, args: Sequence[Any], replicas: "_replicas.Replicas",
               name: Any) -> "_replicas.Outcome":
    """Sends `args` with the `WAIT` its replicas need, in one round trip."""
    required = 0 if replicas.setting == 0 else replicas.required(online(connection), name)
    waits = [] if replicas.off else replicas.wait_command(required)
    replies = _replicas.exchange(connection, [list(args), *waits])
    outcome = _replicas.Outcome(replies, required, replicas if waits else None, name)
    return outcome


async def async_replicated(connection: Any, args: Sequence[Any], replicas: "_replicas.Replicas",
                           name: Any) -> "_replicas.Outcome":
    required = 0 if replicas.setting == 0 else replicas.required(await async_online(connection), name)
    waits = [] if replicas.off else replicas.wait_command(required)
    replies = await _replicas.async_exchange(connection, [list(args), *waits])
    return _replicas.Outcome(replies, required, replicas if waits else None, name)


def kept(connection: Any, commands: Sequence[Sequence[Any]], replicas: "_replicas.Replicas",
         name: Any) -> Tuple[List[Any], int, int, Any, Optional["_replicas.Replicas"]]:
    """The replies of `commands` and their `WAIT`, as `_replicas._kept` reads them."""
    required = 0 if replicas.setting == 0 else replicas.required(online(connection), name)
    waits = [] if replicas.off else replicas.wait_command(required)
    replies = _replicas.exchange(connection, [*commands, *waits])
    return replies, len(commands), required, name, replicas if waits else None


async def async_kept(connection: Any, commands: Sequence[Sequence[Any]],
                     replicas: "_replicas.Replicas", name: Any
                     ) -> Tuple[List[Any], int, int, Any, Optional["_replicas.Replicas"]]:
    required = 0 if replicas.setting == 0 else replicas.required(await async_online(connection), name)
    waits = [] if replicas.off else replicas.wait_command(required)
    replies = await _replicas.async_exchange(connection, [*commands, *waits])
    return replies, len(commands), required, name, replicas if waits else None
