"""`replicas`: a grant counts once the master's replicas have it (docs/clients.md,
"Failover-safe by default").

Every write that makes or keeps a grant (an acquire, an extend, the watchdog's extends)
asks the server to hold its reply until `n` replicas have it (`REPLICAS n REPLTIMEOUT
ms`): the server counts the acknowledgements of the grant's own offset and, when fewer
than `n` come in time, undoes the grant itself and answers `NOTREPLICATED`. A server
that does not take `REPLICAS` (Redis 7.0, or an older module: it refuses the command,
changing nothing) gets the write again with `WAIT n timeout` on the same connection, in
the same round trip, from then on; there a grant too few replicas acknowledged is
released at once by its token. Either way it is reported as not replicated, never as
granted.

`replicas="auto"` (the default) asks for 1 when the master has a replica online, and for
nothing on a master without one. What a connection learned of its master (`ROLE`, or
`WAIT 0 0` for a user whose ACL denies `ROLE`) is forgotten when it connects again (a
failover, a reconnect), after an error or a shortfall, and after `RELEARN_SECONDS`. A
master that lists fewer replicas than before is taken at its former count for
`HOLD_SECONDS` after its last drop (a deposed master loses its replicas just before it
is demoted). An
explicit `n` asks for `n`, and a master with fewer replicas online refuses at once.
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Union

from redis.exceptions import ResponseError

from ._protocol import Number
from .exceptions import LockError, LockNotReplicatedError, lock_error

AUTO = "auto"
# The longest default wait for the replicas: a tenth of the TTL, at most this (ms).
MAX_DEFAULT_TIMEOUT_MS = 1000
# How long what a connection learned of its master's replicas is trusted.
RELEARN_SECONDS = 5.0
# How long a master that lists fewer replicas than before is taken at its former count:
# a deposed master whose partition healed drops its replicas just before Sentinel (or
# the cluster) makes it a replica, and its grants in between must not count unwaited.
HOLD_SECONDS = 15.0
_ATTRIBUTE = "_redis_lock_replicas"
_FORGETTER = "_redis_lock_forgetter"

Setting = Union[str, int]


def check_setting(replicas: Any) -> Setting:
    """`"auto"` or a whole number of replicas from 0 (off)."""
    if replicas == AUTO:
        return AUTO
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ValueError(f'replicas must be "auto" or a number of replicas from 0, not {replicas!r}')
    return replicas


def timeout_ms(replicas_timeout: Optional[Number], ttl_ms: int, fsync: bool = False) -> int:
    """The `WAIT`'s timeout: `replicas_timeout` seconds, or a tenth of the TTL, at most
    1 s (with `fsync`, a third of the TTL, at most 2 s: a replica reports its fsync once a
    second); never 0 (which `WAIT` reads as no limit)."""
    if replicas_timeout is None:
        if fsync:
            return max(1, min(ttl_ms // 3, 2 * MAX_DEFAULT_TIMEOUT_MS))
        return max(1, min(ttl_ms // 10, MAX_DEFAULT_TIMEOUT_MS))
    if isinstance(replicas_timeout, bool) or not isinstance(replicas_timeout, (int, float)) \
            or not 0 < replicas_timeout <= 3600:
        raise ValueError(f"replicas_timeout must be a number of seconds above 0, up to 3600, "
                         f"not {replicas_timeout!r}")
    return max(1, round(replicas_timeout * 1000))


class Replicas:
    """A lock's `replicas` and `replicas_timeout`: the `WAIT` after each grant, and what
    its answer means."""

    def __init__(self, replicas: Any, replicas_timeout: Optional[Number], ttl_ms: int,
                 fsync: bool = False):
        self.setting = check_setting(replicas)
        if not isinstance(fsync, bool):
            raise ValueError(f"fsync must be True or False, not {fsync!r}")
        self.fsync = fsync
        self.timeout_ms = timeout_ms(replicas_timeout, ttl_ms, fsync)

    @property
    def off(self) -> bool:
        """No wait at all: no replicas asked for, and no fsync."""
        return self.setting == 0 and not self.fsync

    def required(self, online: int, name: Any) -> int:
        """How many acknowledgements a grant needs from a master with `online` replicas;
        LockNotReplicatedError (nothing sent) when an explicit number is more than it has."""
        if self.setting == 0:
            return 0
        if self.setting == AUTO:
            return 1 if online > 0 else 0
        assert isinstance(self.setting, int)
        if online < self.setting:
            raise lock_error(
                LockNotReplicatedError,
                f"The master has {online} replicas online and replicas={self.setting} asks "
                f"for {self.setting}: not acquired", str(name)).counted(online, self.setting, refused=True)
        return self.setting

    def wait_command(self, required: int) -> List[List[Any]]:
        """`WAIT required timeout`, or with `fsync` `WAITAOF 1 required timeout` (the
        master's own fsync and the replicas'), or nothing."""
        if self.fsync:
            return [["WAITAOF", 1, required, self.timeout_ms]]
        return [["WAIT", required, self.timeout_ms]] if required else []

    def shortfall(self, name: Any, required: int, answer: Any,
                  what: str = "granted") -> Optional[LockNotReplicatedError]:
        """None when `answer` (the `WAIT`'s, or the `WAITAOF`'s) counts what was asked,
        else the error that says how many of how many did. A `WAITAOF` the server refuses
        (before Redis 7.2 and Valkey 8, or without `appendonly yes`) is an error that
        trying again will not mend (`refused`)."""
        if self.fsync:
            if isinstance(answer, BaseException) or not isinstance(answer, (list, tuple)):
                return lock_error(
                    LockNotReplicatedError,
                    f"The lock was {what}, but WAITAOF failed (fsync needs Redis 7.2+ or "
                    f"Valkey 8+ with appendonly yes): {answer}", str(name)).counted(
                        0, required, refused=True)
            local, acked = int(answer[0]), int(answer[1])
            if local >= 1 and acked >= required:
                return None
            return lock_error(
                LockNotReplicatedError,
                f"The lock was {what}, but the master fsynced it {local} times and {acked} of "
                f"{required} replicas did, in time", str(name)).counted(acked, required)
        acked = answer if isinstance(answer, int) else 0
        if required == 0 or acked >= required:
            return None
        why = "" if isinstance(answer, int) else f" (WAIT answered: {answer})"
        return lock_error(
            LockNotReplicatedError,
            f"The lock was {what}, but only {acked} of {required} replicas acknowledged it "
            f"in time{why}", str(name)).counted(acked, required)


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
    learned = _Learned(_held_count(_address(connection), online))
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


def _address(connection: Any) -> Any:
    return (getattr(connection, "host", None), getattr(connection, "port", None),
            getattr(connection, "path", None))


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


# One round trip on one connection.

def pack(connection: Any, commands: Sequence[Sequence[Any]]) -> Any:
    return connection.pack_commands([tuple(command) for command in commands])


def read_all(connection: Any, count: int) -> List[Any]:
    """`count` replies, an error reply as its ResponseError (the ones after it are still
    read, so the connection stays in step)."""
    replies: List[Any] = []
    for _ in range(count):
        try:
            replies.append(connection.read_response())
        except ResponseError as error:
            replies.append(error)
    return replies


def exchange(connection: Any, commands: Sequence[Sequence[Any]]) -> List[Any]:
    """Sends `commands` in one write and reads their replies: one round trip."""
    connection.send_packed_command(pack(connection, commands))
    return read_all(connection, len(commands))


def online(connection: Any) -> int:
    """The replicas the connection's master has online, learned now if not known."""
    count = known(connection)
    if count is not None:
        return count
    (reply,) = exchange(connection, [["ROLE"]])
    if isinstance(reply, ResponseError):
        if not refused_role(reply):
            raise reply
        (reply,) = exchange(connection, [["WAIT", 0, 0]])
        if isinstance(reply, ResponseError):
            raise reply
    return remember(connection, online_from(reply))


# Whether the server at an address holds a grant's reply for its replicas itself
# (`REPLICAS n`): learned from its first answer to it.
_SERVER_WAITS: Dict[Any, bool] = {}


def server_waits(connection: Any, replicas: Replicas, required: int) -> bool:
    """Whether to ask the server to wait (`REPLICAS`): replicas are required, no fsync
    (the server's wait is for replicas only), and the server has not refused it."""
    return required > 0 and not replicas.fsync and _SERVER_WAITS.get(_address(connection), True)


def tells_server_not_to_wait(connection: Any, replicas: Replicas) -> bool:
    """Whether the writes must say `REPLICAS 0`: the package asks no replica
    (`replicas=0`) or waits itself (`WAITAOF`, with fsync), and the server's own
    `lock.replicas` (`auto` by default) would hold them otherwise. Not to a server known
    to refuse `REPLICAS` (an older module)."""
    return (replicas.setting == 0 or replicas.fsync) and _SERVER_WAITS.get(
        _address(connection), True)


def without_server_wait(commands: Sequence[Sequence[Any]]) -> List[List[Any]]:
    return [[*command, "REPLICAS", 0] for command in commands]


def with_replicas(commands: Sequence[Sequence[Any]], replicas: Replicas,
                  required: int) -> List[List[Any]]:
    return [[*command, "REPLICAS", required, "REPLTIMEOUT", replicas.timeout_ms]
            for command in commands]


def _error_text(reply: Any) -> str:
    text = str(reply)
    return text[4:] if text.startswith("ERR ") else text


def learned_server_waits(connection: Any, replies: Sequence[Any]) -> bool:
    """Whether the server took `REPLICAS` (kept for its address): a server that cannot
    wait answers `ERR REPLICAS needs ...`, an older module `unknown option 'REPLICAS'`,
    and changes nothing."""
    refused = any(isinstance(reply, ResponseError) and (
        _error_text(reply).startswith("REPLICAS needs")
        or "unknown option 'REPLICAS'" in _error_text(reply)) for reply in replies)
    if refused:
        _SERVER_WAITS[_address(connection)] = False
    return not refused


def not_replicated(reply: Any, name: Any,
                   what: str = "granted") -> Optional[LockNotReplicatedError]:
    """The server's `NOTREPLICATED acked <a> required <n>` (it undid the grant; an extend
    kept the lock) as LockNotReplicatedError, else None."""
    text = str(reply) if isinstance(reply, ResponseError) else ""
    if not text.startswith("NOTREPLICATED"):
        return None
    words = text.split()
    try:
        acked, required = int(words[2]), int(words[4])
    except (IndexError, ValueError):
        acked, required = 0, 1
    return lock_error(
        LockNotReplicatedError,
        f"The lock was {what}, but only {acked} of {required} replicas acknowledged it in "
        f"time (the server undid the grant; an extend keeps the lock)", str(name)).counted(
            acked, required)


def replicated(connection: Any, args: Sequence[Any], replicas: Replicas,
               name: Any) -> "Outcome":
    """Sends `args` (a write that makes or keeps a grant) asking the server to wait for
    its replicas, or with the `WAIT` it needs, in one round trip on `connection`."""
    required = 0 if replicas.setting == 0 else replicas.required(online(connection), name)
    if server_waits(connection, replicas, required):
        replies = exchange(connection, with_replicas([args], replicas, required))
        if learned_server_waits(connection, replies):
            return Outcome(replies, required, None, name)
    waits = [] if replicas.off else replicas.wait_command(required)
    if tells_server_not_to_wait(connection, replicas):
        replies = exchange(connection, [*without_server_wait([args]), *waits])
        if learned_server_waits(connection, replies[:1]):
            return Outcome(replies, required, replicas if waits else None, name)
    replies = exchange(connection, [list(args), *waits])
    return Outcome(replies, required, replicas if waits else None, name)


async def async_exchange(connection: Any, commands: Sequence[Sequence[Any]]) -> List[Any]:
    await connection.send_packed_command(pack(connection, commands))
    replies: List[Any] = []
    for _ in commands:
        try:
            replies.append(await connection.read_response())
        except ResponseError as error:
            replies.append(error)
    return replies


async def async_online(connection: Any) -> int:
    count = known(connection)
    if count is not None:
        return count
    (reply,) = await async_exchange(connection, [["ROLE"]])
    if isinstance(reply, ResponseError):
        if not refused_role(reply):
            raise reply
        (reply,) = await async_exchange(connection, [["WAIT", 0, 0]])
        if isinstance(reply, ResponseError):
            raise reply
    return remember(connection, online_from(reply))


async def async_replicated(connection: Any, args: Sequence[Any], replicas: Replicas,
                           name: Any) -> "Outcome":
    required = 0 if replicas.setting == 0 else replicas.required(await async_online(connection), name)
    if server_waits(connection, replicas, required):
        replies = await async_exchange(connection, with_replicas([args], replicas, required))
        if learned_server_waits(connection, replies):
            return Outcome(replies, required, None, name)
    waits = [] if replicas.off else replicas.wait_command(required)
    if tells_server_not_to_wait(connection, replicas):
        replies = await async_exchange(connection, [*without_server_wait([args]), *waits])
        if learned_server_waits(connection, replies[:1]):
            return Outcome(replies, required, replicas if waits else None, name)
    replies = await async_exchange(connection, [list(args), *waits])
    return Outcome(replies, required, replicas if waits else None, name)


class Outcome:
    """The replies of a write and its `WAIT`: `reply` (raised if it was an error; a
    `NOTREPLICATED` as LockNotReplicatedError), and `missing(name)`, the shortfall's
    error or None."""

    def __init__(self, replies: List[Any], required: int, waited: Optional[Replicas],
                 name: Any = None):
        self.replies = replies
        self.required = required
        self.waited = waited  # the setting whose wait was sent, None when none was
        self.name = name

    @property
    def reply(self) -> Any:
        reply = self.replies[0]
        if isinstance(reply, BaseException):
            raise not_replicated(reply, self.name) or reply
        return reply

    def missing(self, name: Any, what: str = "granted") -> Optional[LockNotReplicatedError]:
        if self.waited is None:
            return None
        return self.waited.shortfall(name, self.required, self.replies[1], what)


# A grant: the write, its WAIT, and the release of a grant too few replicas have.

def _granted_reply(connection: Any, outcome: Outcome) -> Any:
    """The acquire's reply; a shortfall the server answered (it undid the grant) raised,
    what the connection learned of its master forgotten."""
    try:
        return outcome.reply
    except LockNotReplicatedError:
        forget(connection)
        raise


def granted(connection: Any, args: Sequence[Any], replicas: Replicas, name: Any,
            releases: Sequence[Sequence[Any]]) -> Any:
    """The reply of the acquire `args`, sent with the `WAIT` it needs; when too few
    replicas acknowledged a grant, `releases` are sent at once (on the same connection)
    and LockNotReplicatedError is raised."""
    outcome = replicated(connection, args, replicas, name)
    missing = outcome.missing(name) if _granted_reply(connection, outcome) is not None else None
    if missing is None:
        return outcome.reply
    forget(connection)
    try:
        exchange(connection, releases)
    except Exception:
        pass  # the shortfall says more; the TTL frees the lock anyway
    raise missing


async def async_granted(connection: Any, args: Sequence[Any], replicas: Replicas, name: Any,
                        releases: Sequence[Sequence[Any]]) -> Any:
    outcome = await async_replicated(connection, args, replicas, name)
    missing = outcome.missing(name) if _granted_reply(connection, outcome) is not None else None
    if missing is None:
        return outcome.reply
    forget(connection)
    try:
        await async_exchange(connection, releases)
    except Exception:
        pass  # the shortfall says more; the TTL frees the lock anyway
    raise missing


# A connection to a key's master, from the client's own pool.

def pool_of(client: Any, key: Any) -> Any:
    """Where the client's connections to `key`'s master come from: its pool (a plain or
    Sentinel client), the pool of the cluster node that serves the key, or (asyncio
    `RedisCluster`) that node itself."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return pool
    node = client.get_node_from_key(key)
    if hasattr(node, "acquire_connection"):
        return node
    return client.get_redis_connection(node).connection_pool


def on_master(client: Any, key: Any, work: Callable[[Any], Any]) -> Any:
    """`work(connection)` on a connection to `key`'s master from the client's pool,
    tried again on a connection error as the client's retry policy says (the write is
    idempotent: the same token re-acquires)."""
    pool = pool_of(client, key)
    try:
        connection = pool.get_connection()
    except TypeError:  # redis-py before 5 names the command
        connection = pool.get_connection("LOCK.ACQUIRE")

    def broken(error: Optional[BaseException] = None) -> None:
        forget(connection)
        connection.disconnect()

    try:
        retry = getattr(connection, "retry", None)
        if retry is None:
            return work(connection)
        return retry.call_with_retry(lambda: work(connection), broken)
    except LockError:
        raise
    except BaseException:
        broken()  # a reply may be left unread
        raise
    finally:
        pool.release(connection)


async def async_on_master(client: Any, key: Any, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """`on_master` for `redis.asyncio` clients."""
    pool = pool_of(client, key)
    if hasattr(pool, "acquire_connection"):  # an asyncio cluster's node
        connection = pool.acquire_connection()
    else:
        try:
            connection = await pool.get_connection()
        except TypeError:  # redis-py before 5 names the command
            connection = await pool.get_connection("LOCK.ACQUIRE")

    async def broken(error: Optional[BaseException] = None) -> None:
        forget(connection)
        await connection.disconnect()

    try:
        retry = getattr(connection, "retry", None)
        if retry is None:
            return await work(connection)
        return await retry.call_with_retry(lambda: work(connection), broken)
    except LockError:
        raise
    except BaseException:
        await broken()  # a reply may be left unread
        raise
    finally:
        released = pool.release(connection)
        if inspect.isawaitable(released):
            await released


def kept(connection: Any, commands: Sequence[Sequence[Any]], replicas: Replicas,
         name: Any) -> List[Any]:
    """The replies of `commands` (extends: 1 where still held), sent with the `WAIT` they
    need; LockNotReplicatedError when all were kept but too few replicas acknowledged."""
    required = 0 if replicas.setting == 0 else replicas.required(online(connection), name)
    if server_waits(connection, replicas, required):
        replies = exchange(connection, with_replicas(commands, replicas, required))
        if learned_server_waits(connection, replies):
            return _kept(replies, len(commands), required, name, None)
    waits = [] if replicas.off else replicas.wait_command(required)
    if tells_server_not_to_wait(connection, replicas):
        replies = exchange(connection, [*without_server_wait(commands), *waits])
        if learned_server_waits(connection, replies[:len(commands)]):
            return _kept(replies, len(commands), required, name, replicas if waits else None)
    return _kept(exchange(connection, [*commands, *waits]), len(commands), required, name,
                 replicas if waits else None)


async def async_kept(connection: Any, commands: Sequence[Sequence[Any]], replicas: Replicas,
                     name: Any) -> List[Any]:
    required = 0 if replicas.setting == 0 else replicas.required(await async_online(connection), name)
    if server_waits(connection, replicas, required):
        replies = await async_exchange(connection, with_replicas(commands, replicas, required))
        if learned_server_waits(connection, replies):
            return _kept(replies, len(commands), required, name, None)
    waits = [] if replicas.off else replicas.wait_command(required)
    if tells_server_not_to_wait(connection, replicas):
        replies = await async_exchange(connection, [*without_server_wait(commands), *waits])
        if learned_server_waits(connection, replies[:len(commands)]):
            return _kept(replies, len(commands), required, name, replicas if waits else None)
    return _kept(await async_exchange(connection, [*commands, *waits]), len(commands), required,
                 name, replicas if waits else None)


def _kept(replies: List[Any], count: int, required: int, name: Any,
          waited: Optional[Replicas]) -> List[Any]:
    held = replies[:count]
    for reply in held:
        if isinstance(reply, BaseException):
            raise not_replicated(reply, name, "extended") or reply
    if waited is not None and all(reply == 1 for reply in held):
        missing = waited.shortfall(name, required, replies[count], "extended")
        if missing is not None:
            raise missing
    return held
