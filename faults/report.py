"""The report of a fault run, as Markdown: what ran, then the counts of both systems side
by side, one row per phase, then the module's counts per package."""


COLUMNS = ["grants", "unreplicated", "overlapping", "late acked", "late kept", "store stale", "do refused",
           "store refused", "lost early", "fence back", "longest gap"]
MODULE_ONLY = ("do refused", "store refused", "fence back")
PACKAGE_COLUMNS = ["grants", "unreplicated", "overlapping", "fence back", "late acked", "do refused",
                   "lost early"]
PACKAGES = ("python", "node", "rust", "php")


def markdown(rows, o, version, run, operations, seconds):
    clocks = sorted({c.library for c in run.topology.clocks.values()})
    out = [
        f"### {version}",
        "",
        f"`python3 -m faults --server {o.server} --nemeses {o.nemeses}"
        + (f" --mixed {o.mixed}" if o.mixed else "") + f" --seed {o.seed} --fault-seconds {o.fault_seconds:g}"
        + f" --ttl {o.ttl} --workers {o.workers} --node-workers {o.node_workers}"
        + f" --rust-workers {o.rust_workers} --php-workers {o.php_workers} --keys {o.keys}"
        + (f" --min-replicas {o.min_replicas}" if o.min_replicas else "")
        + (f" --wait-replicas {o.wait_replicas}" if o.wait_replicas else "")
        + (f" --replicas {o.replicas}" if o.replicas != "auto" else "")
        + (f" --server-replicas {o.server_replicas}" if o.server_replicas != "auto" else "")
        + (" --unchecked-store" if o.unchecked_store else "") + "`",
        "",
        f"{seconds:.0f} s, {operations} operations logged, {o.workers} workers and {o.keys} "
        f"lock(s) per system (and more of the module's: {o.node_workers} on the Node package, "
        f"{o.rust_workers} on the Rust one, {o.php_workers} on the PHP one), "
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
    return "\n".join(out + per_package(rows)) + "\n"


def per_package(rows):
    """The module's counts per package, summed over the phases without a clock jump (where
    `overlapping` and `fence back` must be 0) and, apart, over those with one."""
    out = []
    for title, chosen in (("without a clock jump", lambda phase: "clock" not in phase),
                          ("with a clock jump", lambda phase: "clock" in phase)):
        picked = [row for row in rows if chosen(row["phase"])]
        if not picked:
            continue
        out += ["", f"The module's workers per package, phases {title} ({len(picked)}):", "",
                "| package | " + " | ".join(PACKAGE_COLUMNS) + " |", "|---" * (len(PACKAGE_COLUMNS) + 1) + "|"]
        found = sorted({p for row in picked for p in row["packages"]},
                       key=lambda p: PACKAGES.index(p) if p in PACKAGES else len(PACKAGES))
        for package in found:
            sums = [sum(row["packages"][package].get(c, 0) for row in picked) for c in PACKAGE_COLUMNS]
            out.append(f"| {package} | " + " | ".join(str(n) for n in sums) + " |")
    return out
