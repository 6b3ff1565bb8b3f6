"""Errors. `LockError` and `LockNotOwnedError` are redis-py's own classes, so code that
catches them around `redis.lock.Lock` keeps working with this package's `Lock`."""

from __future__ import annotations

from typing import Optional, Type, TypeVar

from redis.exceptions import LockError, LockNotOwnedError

__all__ = ["LockError", "LockNotOwnedError", "LockLostError", "lock_error"]

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
