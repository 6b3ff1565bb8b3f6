"""What a fault run left, read back once its workers stopped: every worker's history, the
data lists on the final master, the store's accepted writes, and which server it was;
then the checker's counts."""

import glob
import json
import os

from . import checker
from .store import accepted_writes, open_store
from .workers import SYSTEMS


def history(work_dir):
    """Every worker's logged operations, each worker's in its order."""
    entries = []
    for path in sorted(glob.glob(os.path.join(work_dir, "*.jsonl"))):
        with open(path) as f:
            for line in f:
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    pass       # a line cut by the worker's end
    return entries


def data_lists(topology, master, keys):
    """The protected data lists on `master`: key -> entries ("<fence>:<writer>")."""
    data = {}
    for key in [f"{system[0]}{k}" for system in SYSTEMS for k in range(keys)]:
        reply = topology.call(master, "LRANGE", f"data:{key}", 0, -1, timeout=5)
        data[key] = [e.decode() for e in reply]
    return data


def server_version(topology, master):
    info = topology.call(master, "INFO", "server", timeout=5).decode()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    if "valkey_version" in fields:
        return f"Valkey {fields['valkey_version']}"
    return f"Redis {fields.get('redis_version', '?')}"


def check(run, master, phases, end):
    """The checker's rows for `run`, the server's version and how many operations were
    logged."""
    entries = history(run.dir)
    db = open_store(run.store_path)
    accepted = accepted_writes(db)
    db.close()
    rows = checker.check(entries, accepted, data_lists(run.topology, master, run.o.keys), phases, end,
                         run.workers.packages())
    return rows, server_version(run.topology, master), len(entries)


def written_since(store_path, key, since, not_by):
    """True if the store accepted a write to `key` by another writer after `since`."""
    db = open_store(store_path)
    try:
        row = db.execute("SELECT count(*) FROM accepted WHERE key = ? AND at > ? AND writer != ?",
                         (key, since, not_by)).fetchone()
    finally:
        db.close()
    return row[0] > 0
