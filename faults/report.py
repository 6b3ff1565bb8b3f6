"""The report of a fault run, as Markdown: what ran, then one table per system."""

from checker import SYSTEMS

COLUMNS = ["grants", "overlapping", "late acked", "late kept", "store stale", "do refused",
           "store refused", "lost early", "fence back", "longest gap"]


def markdown(rows, o, version, run, operations, seconds):
    clocks = sorted({c.library for c in run.topology.clocks.values()})
    out = [
        f"### {version.replace('_version:', ' ')}",
        "",
        f"`python3 faults/run.py --server {o.server} --nemeses {o.nemeses}"
        + (f" --mixed {o.mixed}" if o.mixed else "") + f" --seed {o.seed} --fault-seconds {o.fault_seconds:g}"
        + f" --ttl {o.ttl} --workers {o.workers}"
        + (f" --min-replicas {o.min_replicas}" if o.min_replicas else "")
        + (" --unchecked-store" if o.unchecked_store else "") + "`",
        "",
        f"{seconds:.0f} s, {operations} operations logged, {o.workers} workers per system, "
        f"locks of {o.ttl} ms, clock jumps by {', '.join(clocks)}.",
        "",
    ]
    out += [f"- {note}" for note in run.notes]
    for system in SYSTEMS:
        out += ["", f"**{system}**" + (" (`SET NX PX` + compare-and-delete, no fence)" if system == "recipe" else
                                       " (`LOCK.ACQUIRE`, `LOCK.DO`, fenced store)"), ""]
        out.append("| phase | " + " | ".join(COLUMNS) + " |")
        out.append("|---" * (len(COLUMNS) + 1) + "|")
        for row in rows:
            cells = []
            for column in COLUMNS:
                value = row[system].get(column, 0)
                if system == "recipe" and column in ("fence back", "do refused", "store refused"):
                    value = "n/a"
                cells.append(str(value))
            out.append(f"| {row['phase']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
