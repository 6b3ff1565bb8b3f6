"""Reads a run's history (every worker's operations with invocation and completion
times), the store's accepted writes and the data lists the final master holds, and
counts, per phase (the fault and the time after its heal) and per system:

  grants          acknowledged grants (exclusive and shared)
  unreplicated    grants released at once because WAIT said too few replicas had them
                  (with --wait-replicas)
  overlapping     acknowledged grants that overlapped an earlier one on the same key
                  (two writers, or a writer and a reader), each grant taken as held from
                  its answer until its release was sent or its TTL, counted from when the
                  acquire (or the last renewal) was sent, ran out: what a careful client
                  believes it holds (so a grant answered after that, its reply held up
                  by a partition, overlaps nothing: it is held by nobody's belief, and
                  its late writes are counted as such)
  late acked      protected writes (LOCK.DO, or the recipe's RPUSH) a server acknowledged
                  after a newer grant of the same key had been acknowledged
  late kept       writes in the final data list below a write before them: a superseded
                  holder's write that stayed (must be 0 for the module)
  store stale     writes the fenced store accepted below the highest it had accepted
                  (must be 0 for the module)
  lost early      releases answered "not held" while the grant's TTL had not run out:
                  a grant the servers lost (a failover, a clock jump, a session freed)
  fence back      grants whose fence is not above that of a grant acknowledged before
                  they were asked for (module; the recipe has none)
  do refused      LOCK.DO writes the server refused (NOTHELD): a late holder stopped
  store refused   writes the fenced store refused (a fence below the highest)
  longest gap     the longest time, in seconds, without any grant of that system

With `packages` (worker name -> the package it locks with: python, node, rust, php), the
module's counts are kept per package too (`row["packages"]`), each count going to the
package of the worker it is about (for `overlapping`, the later grant's).
"""

import bisect
from collections import defaultdict

SYSTEMS = ("module", "recipe")
MUST_BE_ZERO = ("late kept", "store stale")
# And these, in every phase without a clock jump: the packages' grants wait for a replica
# (`replicas="auto"`), so no failover or partition gives a lock to two holders at once.
MUST_BE_ZERO_UNLESS_CLOCK = ("overlapping", "fence back")


def grants_of(history):
    """The acknowledged grants, each with its release and its writes, per worker."""
    grants, open_grant = [], {}
    for e in history:
        if e["op"] == "acquire":
            if e.get("ok"):
                g = {"w": e["w"], "system": system_of(e["w"]), "key": e["key"], "mode": e["mode"],
                     "fence": e["fence"], "t0": e["t0"], "t1": e["t1"], "ttl": e["ttl"] / 1000,
                     "release": None, "writes": []}
                g["end"] = g["t0"] + g["ttl"]
                grants.append(g)
                open_grant[e["w"]] = g
            continue
        g = open_grant.get(e["w"])
        if g is None or g["key"] != e["key"] or g["fence"] != e.get("fence"):
            continue
        if e["op"] == "do" and not e.get("read"):
            g["writes"].append(e)
        elif e["op"] == "extend" and e.get("ok") and g["release"] is None:
            g["end"] = max(g["end"], e["t0"] + g["ttl"])  # renewed: believed held longer
        elif e["op"] == "release":
            g["release"] = e
            g["end"] = min(g["end"], e["t0"])
    return grants


def system_of(worker):
    """"module" or "recipe", from a worker's name ("module-2")."""
    return worker.split("-")[0]


def below_highest(fences):
    """The positions of the fences below the highest one before them."""
    high = None
    for i, fence in enumerate(fences):
        if high is not None and fence < high:
            yield i
        high = fence if high is None else max(high, fence)


def check(history, accepted, data, phases, run_end, packages=None):
    """history: entries of every worker, each worker's in its order; accepted: the store's
    (key, fence, writer, at) in acceptance order; data: key -> the final list's entries
    ("<fence>:<writer>"); phases: [(name, start)]; packages: worker -> package, or None.
    Returns rows: one dict per phase, with counts per system (and per package of the
    module's workers under "packages")."""
    packages = packages or {}
    rows = [{"phase": name, "start": start, "end": phases[i + 1][1] if i + 1 < len(phases) else run_end,
             "packages": defaultdict(lambda: defaultdict(int)),
             **{s: defaultdict(int) for s in SYSTEMS}} for i, (name, start) in enumerate(phases)]

    starts = [start for _, start in phases]

    def count(worker, t, what):
        """Counts `what` for `worker`'s system (and package) in the phase whose window
        holds time t."""
        row = rows[max(0, bisect.bisect_right(starts, t) - 1)]
        row[system_of(worker)][what] += 1
        if worker in packages:
            row["packages"][packages[worker]][what] += 1

    grants = grants_of(history)
    for e in history:
        if e["op"] == "acquire" and (e.get("err") or "").startswith("NOTREPLICATED"):
            count(e["w"], e["t1"], "unreplicated")
        elif e["op"] == "do" and e.get("ok") is False and "NOTHELD" in (e.get("err") or ""):
            count(e["w"], e["t0"], "do refused")
        elif e["op"] == "store" and e.get("ok") is False:
            count(e["w"], e["t0"], "store refused")
    by_key = defaultdict(list)
    for g in grants:
        by_key[(g["system"], g["key"])].append(g)
        count(g["w"], g["t1"], "grants")
        r = g["release"]
        if r is not None and r.get("ok") is False and not r.get("err") and r["t0"] < g["t0"] + g["ttl"]:
            count(g["w"], r["t0"], "lost early")

    for (system, key), gs in by_key.items():
        gs.sort(key=lambda g: g["t1"])
        answered = [g["t1"] for g in gs]
        # overlapping: an earlier grant still believed held when this one was answered
        longest = max(g["ttl"] for g in gs)
        for j, g in enumerate(gs):
            if g["end"] <= g["t1"]:
                # answered after its TTL, counted from when it was asked, had run out (a
                # reply held up by a partition): no careful client believes it holds it
                continue
            first = bisect.bisect_left(answered, g["t1"] - longest)
            if any(h["end"] > g["t1"] and h["w"] != g["w"] and not (h["mode"] == g["mode"] == "shared")
                   for h in gs[first:j]):
                count(g["w"], g["t1"], "overlapping")
        # late acked: a write answered OK though a newer grant of the key had been
        # answered before the write was sent (only exclusive holders write)
        for j, g in enumerate(gs):
            for w in g["writes"]:
                if w.get("ok") and bisect.bisect_left(answered, w["t0"]) > j + 1:
                    count(g["w"], w["t0"], "late acked")
        # fence back: not above a fence answered before this grant was asked for
        if system == "module":
            prefix_max, best = [], 0
            for g in gs:
                best = max(best, g["fence"])
                prefix_max.append(best)
            for g in gs:
                before = bisect.bisect_left(answered, g["t0"])
                if before and g["fence"] <= prefix_max[before - 1]:
                    count(g["w"], g["t1"], "fence back")

    # late kept: entries of the final lists below an entry before them
    last_write = {}
    for g in grants:
        for w in g["writes"]:
            last_write[f"{g['fence']}:{g['w']}"] = w["t0"]
    for entries in data.values():
        fences = [int(entry.split(":", 1)[0]) for entry in entries]
        for i in below_highest(fences):
            writer = entries[i].split(":", 1)[1]
            count(writer, last_write.get(entries[i], run_end), "late kept")

    # store stale: accepted below the highest accepted before, per key
    by_store_key = defaultdict(list)
    for key, fence, writer, at in accepted:
        by_store_key[key].append((fence, writer, at))
    for writes in by_store_key.values():
        for i in below_highest([fence for fence, _, _ in writes]):
            _, writer, at = writes[i]
            count(writer, at, "store stale")

    # longest gap without a grant, per system, within each phase
    for system in SYSTEMS:
        times = sorted(g["t1"] for g in grants if g["system"] == system)
        for row in rows:
            inside = [t for t in times if row["start"] <= t < row["end"]]
            edges = [row["start"]] + inside + [row["end"]]
            row[system]["longest gap"] = round(max(b - a for a, b in zip(edges, edges[1:])), 2)
    return rows


def violations(rows, strict_in=None):
    """The must-be-zero counts of the module that are not zero, as text: `late kept` and
    `store stale` in every phase, `overlapping` and `fence back` in every phase without a
    clock jump (a master whose clock jumps expires its locks early; docs/faults.md), or,
    when `strict_in` names nemeses, only in the phases of those. A run of the module with
    `--replicas 0` (the mutation) fails here."""
    def strict(phase):
        if "clock" in phase:
            return False
        return strict_in is None or any(name in phase for name in strict_in)
    return [f"{row['phase']}: module {what} = {row['module'][what]}"
            for row in rows for what in MUST_BE_ZERO + MUST_BE_ZERO_UNLESS_CLOCK
            if row["module"][what] and (what in MUST_BE_ZERO or strict(row["phase"]))]
