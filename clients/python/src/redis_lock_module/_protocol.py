"""The commands' arguments and replies, shared by the synchronous and asyncio locks.

Nothing here talks to a server: it turns a lock's settings into `LOCK.*` arguments and
the server's replies into Python values, so both APIs send exactly the same commands.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

Number = Union[int, float]
Token = Union[bytes, str]

# ttl-ms, timeout-ms and grace-ms are integers 1 (0 for waits and graces) ..= 2^53 - 1.
MAX_MS = (1 << 53) - 1


def to_ms(seconds: Number, what: str, minimum: int = 1) -> int:
    """Seconds (int or float) as whole milliseconds, rounded up so that a short time
    never becomes zero, and checked against the range the module accepts."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    if math.isnan(seconds):
        raise ValueError(f"{what} must be a number of seconds, not NaN")
    ms = MAX_MS if math.isinf(seconds) and seconds > 0 else math.ceil(seconds * 1000)
    if ms < minimum or ms > MAX_MS:
        limit = "0" if minimum == 0 else "0.001"
        raise ValueError(f"{what} must be between {limit} and {MAX_MS / 1000:.0f} seconds, "
                         f"not {seconds!r}")
    return ms


def signed_ms(seconds: Number, what: str) -> int:
    """Seconds (int or float, of any sign) as whole milliseconds, cut toward zero as
    redis-py's `int(seconds * 1000)` cuts them: an extend's added time, where zero and
    less mean "keep the lock's time as it is" (redis-py 8.2)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    if math.isnan(seconds):
        raise ValueError(f"{what} must be a number of seconds, not NaN")
    if math.isinf(seconds):
        return MAX_MS if seconds > 0 else -MAX_MS
    return max(-MAX_MS, min(int(seconds * 1000), MAX_MS))


def new_token() -> bytes:
    """A token made here, before the command is sent (so that a retry after a lost
    reply re-acquires instead of waiting for its own lock): a random version-4 UUID's 32
    hex digits, as redis-py makes its lock tokens (`uuid.uuid4().hex`: 16 random bytes
    from the system, the version and variant bits set). Nothing of the host or the time
    is in it.

    The random bytes are drawn from the system for 64 tokens at a time: a draw costs
    more than the rest of an acquire in the package, a batch of 64 hardly more than one
    (Node's `crypto.randomUUID` keeps such a cache too). Each token is handed out once,
    and a forked child drops the ones it inherited, so that parent and child never hand
    out the same token."""
    while True:
        try:
            return _TOKENS.pop()
        except IndexError:  # none left (another thread may have taken the last)
            _TOKENS.extend(_draw_tokens())


_BATCH = 64
# Every token's version (4) and variant (RFC 4122) bits, set at once on a batch.
_CLEARED = ~sum((0xF << 76 | 0x3 << 62) << 128 * at for at in range(_BATCH))
_SET = sum((0x4 << 76 | 0x2 << 62) << 128 * at for at in range(_BATCH))
_TOKENS: List[bytes] = []
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_TOKENS.clear)


def _draw_tokens() -> List[bytes]:
    bits = int.from_bytes(os.urandom(16 * _BATCH), "big") & _CLEARED | _SET
    digits = bits.to_bytes(16 * _BATCH, "big").hex().encode()
    return [digits[at:at + 32] for at in range(0, len(digits), 32)]


def packed(command: Sequence[Any], encode: Callable[[Any], bytes]) -> bytes:
    """`command` as the server reads it (a RESP array of bulk strings), in one buffer:
    bytes as they are, anything else through the client's `encode` (its encoding, as
    redis-py's own packing does). What redis-py's packer does for any command, in 2.4 µs
    for an acquire's nine arguments where it takes 4.1 (it checks each argument's kind
    and size to hand large values over without a copy, which a lock's arguments never
    need)."""
    parts = [b"*%d\r\n" % len(command)]
    for arg in command:
        if type(arg) is not bytes:
            arg = encode(arg)
        parts.append(b"$%d\r\n%b\r\n" % (len(arg), arg))
    return b"".join(parts)


MAX_LIMIT = 1_000_000


def mode_args(shared: bool = False, limit: Optional[int] = None) -> List[Any]:
    """`SHARED` for a reader, `LIMIT n` for a semaphore's holder, nothing for a mutex or
    a writer; the limit checked here (an integer, 1 to 1,000,000)."""
    if limit is None:
        return ["SHARED"] if shared else []
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}")
    return ["LIMIT", limit]


def acquire_args(name: Any, ttl_ms: int, token: Optional[Token] = None,
                 wait_ms: Optional[int] = None,
                 session_ms: Optional[int] = None,
                 mode: Sequence[Any] = ()) -> List[Any]:
    """`LOCK.ACQUIRE key ttl-ms [TOKEN t] [WAIT ms] [SESSION ms] [SHARED | LIMIT n]`.
    The words as bytes: redis-py sends bytes as they are and encodes a str each time."""
    return [b"LOCK.ACQUIRE", name, ttl_ms, *mode, *_options(token, wait_ms, session_ms)]


def _options(token: Optional[Token], wait_ms: Optional[int],
             session_ms: Optional[int]) -> List[Any]:
    """`[TOKEN t] [WAIT ms] [SESSION ms]`, each when given."""
    args: List[Any] = []
    if token is not None:
        args += [b"TOKEN", token]
    if wait_ms is not None:
        args += ["WAIT", wait_ms]
    if session_ms is not None:
        args += ["SESSION", session_ms]
    return args


def acquire_all_args(names: Sequence[Any], ttl_ms: int, token: Optional[Token] = None,
                     wait_ms: Optional[int] = None, session_ms: Optional[int] = None,
                     shared: bool = False) -> List[Any]:
    """`LOCK.ACQUIREALL numkeys key [key ...] ttl-ms [TOKEN t] [WAIT ms] [SESSION ms]
    [SHARED]`: 1 to 64 distinct keys, checked here."""
    names = list(names)
    if not 1 <= len(names) <= 64:
        raise ValueError(f"1 to 64 keys at once, not {len(names)}")
    args: List[Any] = ["LOCK.ACQUIREALL", len(names), *names, ttl_ms,
                       *_options(token, wait_ms, session_ms)]
    if shared:
        args.append("SHARED")
    return args


def grant_all(reply: Any) -> Optional[Tuple[bytes, List[int]]]:
    """The reply of `LOCK.ACQUIREALL`: `(token, [fence, ...])`, or None when a key is
    busy."""
    if reply is None:
        return None
    token, fences = reply
    return as_bytes(token), [int(fence) for fence in fences]


def grant(reply: Any) -> Optional[Tuple[bytes, int]]:
    """The reply of `LOCK.ACQUIRE`: `(token, fence)`, or None when another token holds
    the lock. The token comes back as bytes whatever the client's decoding."""
    if reply is None:
        return None
    token, fence = reply
    return as_bytes(token), int(fence)


def info_fields(reply: Any) -> Optional[Dict[str, Any]]:
    """`LOCK.INFO` as a dict of str to int, from a RESP3 map or a RESP2 flat list."""
    if reply is None:
        return None
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2])
    return {
        (name.decode() if isinstance(name, bytes) else str(name)): _field_value(value)
        for name, value in pairs
    }


def _field_value(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode()
    try:
        return int(value)
    except (TypeError, ValueError):
        return value  # `mode` is a word, not a number


def as_bytes(token: Token) -> bytes:
    return token if isinstance(token, bytes) else str(token).encode()


def encode_token(redis: Any, token: Token) -> bytes:
    """A caller's token as bytes, with the client's own encoder when it has one (as
    redis-py's Lock does), checked against the 1 ..= 256 bytes the module accepts."""
    if isinstance(token, bytes):
        encoded = token
    else:
        get_encoder = getattr(redis, "get_encoder", None)
        encoded = get_encoder().encode(token) if get_encoder else str(token).encode()
    if not 1 <= len(encoded) <= 256:
        raise ValueError(f"token must be 1 to 256 bytes, not {len(encoded)}")
    return encoded


def blocking_wait_ms(blocking: bool, blocking_timeout: Optional[Number]) -> Optional[int]:
    """The `WAIT` of an acquire: None (do not wait), 0 (without limit) or the limit.

    As in redis-py's Lock, `blocking_timeout=None` waits for as long as it takes; a
    timeout of 0 or less tries once."""
    if not blocking:
        return None
    if blocking_timeout is None:
        return 0
    if blocking_timeout <= 0:
        return None
    return to_ms(blocking_timeout, "blocking_timeout")


def read_timeout_too_short(connection_kwargs: Dict[str, Any], wait_ms: int) -> bool:
    """True when a connection made with these settings would give up reading a reply
    before a wait of `wait_ms` ends (a wait of 0 has no end)."""
    timeout = connection_kwargs.get("socket_timeout")
    if timeout is None:
        return False
    return wait_ms == 0 or float(timeout) * 1000 < wait_ms + 1000


def redlock_quorum(masters: int) -> int:
    return masters // 2 + 1


def redlock_validity(ttl_ms: int, elapsed_ms: float) -> float:
    """What is left of a Redlock lock after acquiring took `elapsed_ms`, minus the
    clock drift allowance of the Redlock algorithm (1% of the TTL plus 2 ms)."""
    drift = ttl_ms * 0.01 + 2
    return ttl_ms - elapsed_ms - drift


def redirection(error: Exception) -> bool:
    """Whether `error` is a cluster's `MOVED` or `ASK`: the key's slot is served
    elsewhere."""
    return str(error).startswith(("MOVED ", "ASK "))


class Waiting:
    """A waiting acquire's wait on a connection of its own, across the redirections of a
    cluster whose slot moves meanwhile: the time left of the wait, and where to ask next
    (`address` after an `ASK`, None for wherever the client's map says after a `MOVED`)."""

    REDIRECTIONS = 5

    def __init__(self, wait_ms: Optional[int]):
        self._wait_ms = wait_ms
        self._started = time.monotonic()
        self._redirections = 0
        self.address: Optional[Tuple[str, int]] = None
        self.asking = False

    def left_ms(self) -> Optional[int]:
        """What is left of the wait: None (no wait), 0 (no limit), or at least 1 ms."""
        if not self._wait_ms:
            return self._wait_ms
        spent = int((time.monotonic() - self._started) * 1000)
        return max(1, self._wait_ms - spent)

    def over(self) -> bool:
        """Whether no time is left to try again: no wait, or a limited one used up."""
        if not self._wait_ms:
            return self._wait_ms is None
        return (time.monotonic() - self._started) * 1000 >= self._wait_ms

    def again(self, error: Exception) -> bool:
        """After a grant too few replicas acknowledged (`error`, released already):
        True to try again while the wait lasts, False without a wait (not acquired);
        raises `error` once the wait is over, or when the master has too few replicas
        (`refused`: trying again would not help)."""
        if getattr(error, "refused", False):
            raise error
        if self._wait_ms is None:
            return False
        if self.over():
            raise error
        return True

    def redirected(self, error: Exception) -> bool:
        """Whether `error` is a cluster's `MOVED`/`ASK` to follow (at most a few times);
        sets where to ask next."""
        words = str(error).split()
        if len(words) != 3 or words[0] not in ("MOVED", "ASK"):
            return False
        self._redirections += 1
        if self._redirections > self.REDIRECTIONS:
            return False
        self.asking = words[0] == "ASK"
        if self.asking:
            host, _, port = words[2].rpartition(":")
            self.address = (host, int(port))
        else:
            self.address = None
        return True
