"""Points redis-py's own lock tests at this package's Lock, changing only what reads
the inner workings of redis-py's recipe (a `SET NX` string key, a polling loop).

Usage: python3 adapt_redis_py.py <the tests/ folder of a redis sdist>

`tests/test_lock.py` and `tests/test_asyncio/test_lock.py` are rewritten in place; every
adaptation below must apply at least once, so that a change upstream is noticed rather
than silently skipped. Nothing else of the suite changes: every other assertion runs as
redis-py wrote it. The adaptations, and why:

1. The Lock under test is this package's (`redis_lock_module.Lock`, and its asyncio
   twin), imported where redis-py imports its own.
2. `r.get("foo") == lock.local.token` (and `== b"test"`) becomes `lock.owned()`: the
   suite reads the token back through GET, but a lock's token is a secret the server
   never shows (GET of a lock key answers WRONGTYPE). `owned()` asks the server whether
   this lock object holds the key, which is what the comparison checks.
3. `r.get("foo") is None` becomes `r.exists("foo") == 0`: the same check of "no lock",
   without GET of a lock key.
4. The assertions on `fake_lock_time` (how far redis-py's patched clock advanced, how
   often its polling loop slept) are dropped: this Lock waits in the server's queue and
   never sleeps in the client, so the fake clock is never read. The outcome of each of
   those tests (`not lock2.acquire()`) is still asserted, in real time.
"""

import re
import sys
from pathlib import Path

SYNC = [
    (1, r"^from redis\.lock import Lock$", "from redis_lock_module import Lock"),
    (2, r"assert r\.get\(\"foo\"\) == lock\.local\.token", "assert lock.owned()"),
    (2, r"assert r\.get\(\"foo\"\) == b\"test\"", "assert lock.owned()"),
    (3, r"assert r\.get\(\"foo\"\) is None", 'assert r.exists("foo") == 0'),
    (4, r"^\s*assert fake_lock_time\.(now|sleeps)\b.*\n", ""),
]

ASYNC = [
    (1, r"^from redis\.asyncio\.lock import Lock$",
     "from redis_lock_module.asyncio import Lock"),
    (2, r"assert await r\.get\(\"foo\"\) == lock\.local\.token", "assert await lock.owned()"),
    (2, r"assert await r\.get\(\"foo\"\) == b\"test\"", "assert await lock.owned()"),
    (3, r"assert await r\.get\(\"foo\"\) is None", 'assert await r.exists("foo") == 0'),
    (4, r"^\s*assert fake_lock_time\.(now|sleeps)\b.*\n", ""),
]


def adapt(path: Path, rules) -> None:
    text = path.read_text()
    for number, pattern, replacement in rules:
        text, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
        if count == 0:
            sys.exit(f"{path}: adaptation {number} ({pattern!r}) found nothing to change: "
                     "redis-py's tests changed, look again")
        print(f"{path.name}: adaptation {number}: {count} x {pattern!r}")
    path.write_text(text)


def main() -> None:
    tests = Path(sys.argv[1])
    adapt(tests / "test_lock.py", SYNC)
    adapt(tests / "test_asyncio" / "test_lock.py", ASYNC)


if __name__ == "__main__":
    main()
