"""The report of a fault run, as Markdown: what ran, then the counts of both systems side
by side, one row per phase."""


COLUMNS = ["grants", "unreplicated", "overlapping", "late acked", "late kept", "store stale", "do refused",
           "store refused", "lost early", "fence back", "longest gap"]
MODULE_ONLY = ("do refused", "store refused", "fence back")


def markdown(rows, o, version, run, operations, seconds):
    clocks = sorted({c.library for c in run.topology.clocks.values()})
    out = [
        f"### {version}",
        "",
        f"`python3 -m faults --server {o.server} --nemeses {o.nemeses}"
        + (f" --mixed {o.mixed}" if o.mixed else "") + f" --seed {o.seed} --fault-seconds {o.fault_seconds:g}"
        + f" --ttl {o.ttl} --workers {o.workers} --node-workers {o.node_workers} --keys {o.keys}"
        + (f" --min-replicas {o.min_replicas}" if o.min_replicas else "")
        + (f" --wait-replicas {o.wait_replicas}" if o.wait_replicas else "")
        + (f" --replicas {o.replicas}" if o.replicas != "auto" else "")
        + (" --unchecked-store" if o.unchecked_store else "") + "`",
        "",
        f"{seconds:.0f} s, {operations} operations logged, {o.workers} workers and {o.keys} "
        f"lock(s) per system (and {o.node_workers} more of the module's on the Node package), "
        f"TTL {o.ttl} ms, clock jumps by {', '.join(clocks)}.",
        "",
    ]
    out += [f"- {note}" for note in run.notes]
    out += ["", "Each cell: module / recipe (the recipe has no fence and no LOCK.DO: n/a).", ""]
    out.append("| phase | " + " | ".join(COLUMNS) + " |")
    out.append("|---" * (len(COLUMNS) + 1) + "|")
    for row in rows:
        cells = []
        for column in COLUMNS:
            module = row["module"].get(column, 0)
            recipe = "n/a" if column in MODULE_ONLY else row["recipe"].get(column, 0)
            cells.append(f"{module} / {recipe}")
        out.append(f"| {row['phase']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
