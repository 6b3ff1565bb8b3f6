"""The external resource the locks protect: an SQLite table that accepts a write only if
its fence is not below the highest it has accepted, as the docs' SQL does
(`UPDATE ... WHERE id = $3 AND fence <= $2`, docs/guarantees.md). Every accepted write is
also appended to `accepted`, in the order the store accepted it, for the checker.

The recipe has no fence: its writes carry the order of their grant (when the SET NX was
answered) instead, and the store takes them unchecked, as a store behind the recipe
does. `checked=False` is also the mutation that shows the checker catches a store that
lets a late write through."""

import sqlite3
import time


def open_store(path, create=False):
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    if create:
        db.execute("CREATE TABLE resource (key TEXT PRIMARY KEY, fence INTEGER NOT NULL, writer TEXT)")
        db.execute("CREATE TABLE accepted (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT, "
                   "fence INTEGER, writer TEXT, at REAL)")
    return db


def write(db, key, fence, writer, checked):
    """True if the store accepted the write of `writer` under `fence`."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("INSERT OR IGNORE INTO resource (key, fence, writer) VALUES (?, 0, NULL)", (key,))
        if checked:
            cursor = db.execute("UPDATE resource SET fence = ?, writer = ? WHERE key = ? AND fence <= ?",
                                (fence, writer, key, fence))
        else:
            cursor = db.execute("UPDATE resource SET fence = ?, writer = ? WHERE key = ?", (fence, writer, key))
        accepted = cursor.rowcount == 1
        if accepted:
            db.execute("INSERT INTO accepted (key, fence, writer, at) VALUES (?, ?, ?, ?)",
                       (key, fence, writer, time.monotonic()))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return accepted


def accepted_writes(db):
    """Every accepted write, in the order the store accepted it: (key, fence, writer, at)."""
    return db.execute("SELECT key, fence, writer, at FROM accepted ORDER BY seq").fetchall()
