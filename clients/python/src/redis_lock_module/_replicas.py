"""`replicas`: a grant counts once the master's replicas have it (docs/clients.md,
"Failover-safe by default").

Every write that makes or keeps a grant (an acquire, an extend, the watchdog's extends)
asks the server to hold its reply until its replicas have it: `REPLICAS AUTO` (the
default: one replica when the master has one, none without, by the server's own rule)
or the number given, with `REPLTIMEOUT ms`. The server counts the acknowledgements of
the grant's own offset and, when too few come in time, undoes the grant itself and
answers `NOTREPLICATED`. The package keeps no knowledge of replicas of its own there:
no `ROLE`, no `INFO`, no `WAIT`. A server that cannot wait (Redis 7.0, or a module
before 0.3.0) refuses the option and changes nothing, and from then on the package
waits itself (`_redis70`). Either way a grant too few replicas acknowledged is reported
as not replicated, never as granted.
"""

from __future__ import annotations

import inspect
from functools import partial
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, Union

from redis.exceptions import ResponseError

from ._protocol import Number, packed
from . import _redis70
from .exceptions import LockError, LockNotReplicatedError, lock_error

AUTO = "auto"
# The longest default wait for the replicas: a tenth of the TTL, at most this (ms).
MAX_DEFAULT_TIMEOUT_MS = 1000

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
        # What the server is asked on the wire: `REPLICAS` with its own rule (`AUTO`) or
        # the number, and `REPLTIMEOUT`; encoded once here, not at each write (redis-py
        # encodes a str or an int on every command; bytes go out as they are).
        rule = b"AUTO" if self.setting == AUTO else str(self.setting).encode()
        self.server_args: Tuple[bytes, ...] = (
            b"REPLICAS", rule, b"REPLTIMEOUT", str(self.timeout_ms).encode())

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


# One round trip on one connection.

def pack(connection: Any, commands: Sequence[Sequence[Any]]) -> Any:
    """`commands` packed for one write, in the connection's encoding: by
    `_protocol.packed`, or by the connection itself where it has no encoder of its own
    (a client-side cache's proxy)."""
    encoder = getattr(connection, "encoder", None)
    if encoder is None:
        return connection.pack_commands([tuple(command) for command in commands])
    return [b"".join([packed(command, encoder.encode) for command in commands])]


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


def exchange_one(connection: Any, command: Sequence[Any]) -> Any:
    """`exchange` of a single command: its reply, an error reply as its ResponseError."""
    connection.send_packed_command(pack(connection, (command,)))
    try:
        return connection.read_response()
    except ResponseError as error:
        return error


# Whether the server at an address holds a grant's reply for its replicas itself
# (`REPLICAS n`): learned from its first answer to it.
_SERVER_WAITS: Dict[Any, bool] = {}


def server_writes(commands: Sequence[Sequence[Any]], replicas: Replicas) -> List[List[Any]]:
    """`commands` asking the server to hold each reply for its replicas (`REPLICAS AUTO`,
    or the number given, 0 included, and `REPLTIMEOUT`); with fsync, a `WAITAOF 1 0`
    after them for the master's own fsync."""
    writes = [[*command, *replicas.server_args] for command in commands]
    if replicas.fsync:
        writes.append(["WAITAOF", 1, 0, replicas.timeout_ms])
    return writes


def server_may_wait(connection: Any) -> bool:
    """Whether the server has not refused `REPLICAS` (it is tried until it does)."""
    return not _SERVER_WAITS or _SERVER_WAITS.get(_address(connection), True)


def _address(connection: Any) -> Any:
    return (getattr(connection, "host", None), getattr(connection, "port", None),
            getattr(connection, "path", None))


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
    """Sends `args` (a write that makes or keeps a grant) asking the server to hold its
    reply until its replicas have it, in one round trip on `connection`; where the server
    cannot (Redis 7.0), with the `WAIT` the package works out itself (`_redis70`)."""
    if server_may_wait(connection):
        if replicas.fsync:
            replies = exchange(connection, server_writes([args], replicas))
            if learned_server_waits(connection, replies[:1]):
                return Outcome(replies, 0, replicas, name)
        else:
            # The common grant: one command, sent and read as redis-py's own are.
            reply = exchange_one(connection, (*args, *replicas.server_args))
            if not isinstance(reply, ResponseError) or learned_server_waits(connection, (reply,)):
                return Outcome([reply], 0, None, name)
    return _redis70.replicated(connection, args, replicas, name)


async def async_exchange(connection: Any, commands: Sequence[Sequence[Any]]) -> List[Any]:
    await connection.send_packed_command(pack(connection, commands))
    replies: List[Any] = []
    for _ in commands:
        try:
            replies.append(await connection.read_response())
        except ResponseError as error:
            replies.append(error)
    return replies


async def async_exchange_one(connection: Any, command: Sequence[Any]) -> Any:
    await connection.send_packed_command(pack(connection, (command,)))
    try:
        return await connection.read_response()
    except ResponseError as error:
        return error


async def async_replicated(connection: Any, args: Sequence[Any], replicas: Replicas,
                           name: Any) -> "Outcome":
    if server_may_wait(connection):
        if replicas.fsync:
            replies = await async_exchange(connection, server_writes([args], replicas))
            if learned_server_waits(connection, replies[:1]):
                return Outcome(replies, 0, replicas, name)
        else:
            reply = await async_exchange_one(connection, (*args, *replicas.server_args))
            if not isinstance(reply, ResponseError) or learned_server_waits(connection, (reply,)):
                return Outcome([reply], 0, None, name)
    return await _redis70.async_replicated(connection, args, replicas, name)


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
        _redis70.forget(connection)
        raise


def granted(connection: Any, args: Sequence[Any], replicas: Replicas, name: Any,
            releases: Sequence[Sequence[Any]]) -> Any:
    """The reply of the acquire `args`, sent with the `WAIT` it needs; when too few
    replicas acknowledged a grant, `releases` are sent at once (on the same connection)
    and LockNotReplicatedError is raised."""
    outcome = replicated(connection, args, replicas, name)
    reply = _granted_reply(connection, outcome)
    missing = outcome.missing(name) if reply is not None else None
    if missing is None:
        return reply
    _redis70.forget(connection)
    try:
        exchange(connection, releases)
    except Exception:
        pass  # the shortfall says more; the TTL frees the lock anyway
    raise missing


async def async_granted(connection: Any, args: Sequence[Any], replicas: Replicas, name: Any,
                        releases: Sequence[Sequence[Any]]) -> Any:
    outcome = await async_replicated(connection, args, replicas, name)
    reply = _granted_reply(connection, outcome)
    missing = outcome.missing(name) if reply is not None else None
    if missing is None:
        return reply
    _redis70.forget(connection)
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


def on_master(client: Any, key: Any, work: Callable[[Any], Any], retry: bool = True) -> Any:
    """`work(connection)` on a connection to `key`'s master from the client's pool,
    tried again on a connection error as the client's retry policy says (the write is
    idempotent: the same token re-acquires). With `retry=False` once only: a watchdog's
    extend, which its next tick tries again, and which the policy's backoff would
    otherwise send seconds later, after the watchdog ended (a connection closed under
    it by the program's shutdown)."""
    pool = pool_of(client, key)
    try:
        connection = pool.get_connection()
    except TypeError:  # redis-py before 5 names the command
        connection = pool.get_connection("LOCK.ACQUIRE")
    try:
        policy = getattr(connection, "retry", None) if retry else None
        if policy is None:
            return work(connection)
        return policy.call_with_retry(partial(work, connection), partial(_broken, connection))
    except LockError:
        raise
    except BaseException:
        _broken(connection)  # a reply may be left unread
        raise
    finally:
        pool.release(connection)


def _broken(connection: Any, error: Optional[BaseException] = None) -> None:
    """A connection whose state is unknown (an error cut an exchange): closed, and what
    was learned of its master forgotten."""
    _redis70.forget(connection)
    connection.disconnect()


async def async_on_master(client: Any, key: Any, work: Callable[[Any], Awaitable[Any]],
                          retry: bool = True) -> Any:
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
        _redis70.forget(connection)
        await connection.disconnect()

    try:
        policy = getattr(connection, "retry", None) if retry else None
        if policy is None:
            return await work(connection)
        return await policy.call_with_retry(lambda: work(connection), broken)
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
    """The replies of `commands` (extends: 1 where still held), the server asked to hold
    them for its replicas (`_redis70`: with the `WAIT` they need); LockNotReplicatedError
    when all were kept but too few replicas acknowledged."""
    if server_may_wait(connection):
        replies = exchange(connection, server_writes(commands, replicas))
        if learned_server_waits(connection, replies[:len(commands)]):
            return _kept(replies, len(commands), 0, name, replicas if replicas.fsync else None)
    return _kept(*_redis70.kept(connection, commands, replicas, name))


async def async_kept(connection: Any, commands: Sequence[Sequence[Any]], replicas: Replicas,
                     name: Any) -> List[Any]:
    if server_may_wait(connection):
        replies = await async_exchange(connection, server_writes(commands, replicas))
        if learned_server_waits(connection, replies[:len(commands)]):
            return _kept(replies, len(commands), 0, name, replicas if replicas.fsync else None)
    return _kept(*await _redis70.async_kept(connection, commands, replicas, name))


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
