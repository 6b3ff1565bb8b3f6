"""Errors. `LockError` and `LockNotOwnedError` are redis-py's own classes, so code that
catches them around `redis.lock.Lock` keeps working with this package's `Lock`."""

from __future__ import annotations

from typing import Optional, Type, TypeVar

from redis.exceptions import LockError, LockNotOwnedError

__all__ = ["LockError", "LockNotOwnedError", "LockLostError", "LockNotReplicatedError", "lock_error"]

E = TypeVar("E", bound=LockError)


class LockLostError(LockNotOwnedError):
    """The watchdog found the lock gone while its holder still counted on it: an extend
    was answered 0 (the lock expired, was deleted or went to another token), or the
    server could not be reached for a whole TTL."""


def lock_error(cls: Type[E], message: str, lock_name: Optional[str]) -> E:
    """`cls(message, lock_name=...)`; redis-py before 5.0 has no `lock_name`, so there
    it is set as an attribute instead."""
    try:
        return cls(message, lock_name=lock_name)
    except TypeError:
        error = cls(message)
        error.lock_name = lock_name
        return error


class LockNotReplicatedError(LockError):
    """Fewer replicas than the lock's `replicas` asks for acknowledged a grant (or an
    extend) in time: an acquire's grant was released at once, and nothing is held.
    `acked` of `required` did; `refused` is True when the master had too few replicas
    online for an explicit `replicas=n`, so nothing was sent."""

    acked = 0
    required = 0
    refused = False

    def counted(self, acked: int, required: int,
                refused: bool = False) -> "LockNotReplicatedError":
        self.acked, self.required, self.refused = acked, required, refused
        return self
