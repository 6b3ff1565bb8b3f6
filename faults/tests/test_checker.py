"""The checker's own tests, on recorded histories: a clean one, and one for each thing it
counts, each violation among them. `make test` runs them (tests/faults); so does
`python3 -m unittest discover -s faults/tests -t .` from the repository's root."""

import unittest

from faults import checker

TTL_MS = 1000


def acquire(w, fence, t0, t1, key="m0", mode="exclusive", ok=True, err=None):
    entry = {"op": "acquire", "w": w, "key": key, "mode": mode, "ttl": TTL_MS, "t0": t0, "t1": t1}
    if ok:
        entry.update(ok=True, fence=fence)
    else:
        entry.update(ok=False, err=err)
    return entry


def do(w, fence, t0, ok=True, err=None, key="m0"):
    entry = {"op": "do", "w": w, "key": key, "fence": fence, "t0": t0, "t1": t0 + 0.001, "ok": ok}
    if err:
        entry["err"] = err
    return entry


def store(w, fence, t0, ok=True, key="m0"):
    return {"op": "store", "w": w, "key": key, "fence": fence, "t0": t0, "t1": t0 + 0.001, "ok": ok}


def release(w, fence, t0, ok=True, key="m0"):
    return {"op": "release", "w": w, "key": key, "fence": fence, "t0": t0, "t1": t0 + 0.001, "ok": ok}


class Recorded:
    """A clean run of two module holders one after the other on key m0, each writing
    once to the data list and once to the store; changed by each test to plant one
    violation."""

    def __init__(self):
        self.history = [
            acquire("module-0", 10, 0.00, 0.01),
            do("module-0", 10, 0.10),
            store("module-0", 10, 0.11),
            release("module-0", 10, 0.20),
            acquire("module-1", 11, 0.30, 0.31),
            do("module-1", 11, 0.40),
            store("module-1", 11, 0.41),
            release("module-1", 11, 0.50),
        ]
        self.accepted = [("m0", 10, "module-0", 0.11), ("m0", 11, "module-1", 0.41)]
        self.data = {"m0": ["10:module-0", "11:module-1"]}
        self.phases = [("no fault", 0.0)]
        self.end = 1.0

    def counts(self):
        rows = checker.check(self.history, self.accepted, self.data, self.phases, self.end)
        self.rows = rows
        return {what: n for what, n in rows[0]["module"].items() if what != "longest gap"}

    def violations(self):
        self.counts()
        return checker.violations(self.rows)


class CheckerTest(unittest.TestCase):
    def assert_only(self, counts, **expected):
        expected = {what.replace("_", " "): n for what, n in expected.items()}
        got = {what: n for what, n in counts.items() if n}
        self.assertEqual(got, {"grants": 2, **expected})

    def test_a_clean_history_counts_its_grants_and_nothing_else(self):
        run = Recorded()
        self.assert_only(run.counts())
        self.assertEqual(run.violations(), [])

    def test_a_grant_answered_while_another_is_held_overlaps(self):
        run = Recorded()
        run.history[4] = acquire("module-1", 11, 0.12, 0.15)
        self.assert_only(run.counts(), overlapping=1)
        self.assertEqual(run.violations(), ["no fault: module overlapping = 1"],
                         "the packages wait for a replica: no phase without a clock jump overlaps")

    def test_an_overlap_in_a_phase_with_a_clock_jump_is_counted_not_a_violation(self):
        run = Recorded()
        run.history[4] = acquire("module-1", 11, 0.12, 0.15)
        rows = checker.check(run.history, run.accepted, run.data, [("clock-forward", 0.0)], 10.0)
        self.assertEqual(rows[0]["module"]["overlapping"], 1)
        self.assertEqual(checker.violations(rows), [])

    def test_a_grant_answered_after_its_ttl_overlaps_nothing(self):
        # Its reply held up past the TTL counted from when it was asked (a partition):
        # a careful client knows it holds nothing, so it is not a second holder.
        run = Recorded()
        run.history[4] = acquire("module-1", 11, 0.05, 1.10)
        run.history[7] = release("module-1", 11, 1.2, ok=False)
        run.history[0] = acquire("module-0", 12, 1.00, 1.05)
        run.history[3] = release("module-0", 12, 1.3)
        run.history[1], run.history[2] = do("module-0", 12, 1.06), store("module-0", 12, 1.07)
        run.history[5], run.history[6] = do("module-1", 11, 1.15, ok=False, err="NOTHELD"), store("module-1", 11, 1.16, ok=False)
        run.accepted = [("m0", 12, "module-0", 1.07)]
        run.data = {"m0": ["12:module-0"]}
        run.end = 2.0
        counts = run.counts()
        self.assertEqual(counts.get("overlapping", 0), 0)
        self.assertEqual(counts["grants"], 2)

    def test_two_readers_at_once_do_not_overlap(self):
        run = Recorded()
        run.history[0] = acquire("module-0", 10, 0.00, 0.01, mode="shared")
        run.history[4] = acquire("module-1", 11, 0.12, 0.15, mode="shared")
        self.assert_only(run.counts())

    def test_a_write_acknowledged_after_a_newer_grant_is_late_acked(self):
        run = Recorded()
        run.history[1] = do("module-0", 10, 0.35)
        self.assert_only(run.counts(), late_acked=1)

    def test_a_superseded_write_left_in_the_data_is_late_kept_and_a_violation(self):
        run = Recorded()
        run.data = {"m0": ["11:module-1", "10:module-0"]}
        self.assert_only(run.counts(), late_kept=1)
        self.assertEqual(run.violations(), ["no fault: module late kept = 1"])

    def test_a_store_write_below_the_highest_is_stale_and_a_violation(self):
        run = Recorded()
        run.accepted = [("m0", 11, "module-1", 0.41), ("m0", 10, "module-0", 0.45)]
        self.assert_only(run.counts(), store_stale=1)
        self.assertEqual(run.violations(), ["no fault: module store stale = 1"])

    def test_a_release_refused_within_the_ttl_is_a_grant_lost_early(self):
        run = Recorded()
        run.history[3] = release("module-0", 10, 0.20, ok=False)
        self.assert_only(run.counts(), lost_early=1)

    def test_a_fence_not_above_one_answered_before_is_a_fence_back(self):
        run = Recorded()
        run.history[4] = acquire("module-1", 9, 0.30, 0.31)
        run.history[5] = do("module-1", 9, 0.40)
        run.history[6] = store("module-1", 9, 0.41)
        run.history[7] = release("module-1", 9, 0.50)
        run.data = {"m0": ["10:module-0"]}
        run.accepted = [("m0", 10, "module-0", 0.11)]
        self.assert_only(run.counts(), fence_back=1)

    def test_refusals_are_counted_where_they_happen(self):
        run = Recorded()
        run.history.append(do("module-0", 10, 0.60, ok=False, err="NOTHELD the lock 'm0' is not held"))
        run.history.append(store("module-0", 10, 0.61, ok=False))
        run.history.append(acquire("module-2", None, 0.70, 0.71, ok=False,
                                   err="NOTREPLICATED 0 of 1 replicas"))
        self.assert_only(run.counts(), do_refused=1, store_refused=1, unreplicated=1)

    def test_counts_fall_in_the_phase_of_their_time(self):
        run = Recorded()
        run.phases = [("no fault", 0.0), ("pause-client", 0.25)]
        rows = checker.check(run.history, run.accepted, run.data, run.phases, run.end)
        self.assertEqual([row["module"]["grants"] for row in rows], [1, 1])
        self.assertEqual(rows[0]["end"], 0.25)

    def test_the_longest_gap_runs_between_grants_and_to_the_phase_edges(self):
        run = Recorded()
        rows = checker.check(run.history, run.accepted, run.data, run.phases, run.end)
        self.assertEqual(rows[0]["module"]["longest gap"], 0.69)   # 0.31 to the end at 1.0
        self.assertEqual(rows[0]["recipe"]["longest gap"], 1.0)    # no recipe grant at all

    def test_the_recipe_has_no_fence_to_go_back_and_its_stale_writes_are_no_violation(self):
        run = Recorded()
        for entry in run.history:
            entry["w"] = entry["w"].replace("module", "recipe")
        run.accepted = [("m0", 11, "recipe-1", 0.41), ("m0", 10, "recipe-0", 0.45)]
        run.data = {"m0": ["11:recipe-1", "10:recipe-0"]}
        rows = checker.check(run.history, run.accepted, run.data, run.phases, run.end)
        self.assertEqual(rows[0]["recipe"]["store stale"], 1)
        self.assertEqual(rows[0]["recipe"]["late kept"], 1)
        self.assertEqual(checker.violations(rows), [])


if __name__ == "__main__":
    unittest.main()


class PerPackageTest(unittest.TestCase):
    def test_each_count_goes_to_the_package_of_the_worker_it_is_about(self):
        run = Recorded()
        run.history[4] = acquire("module-1", 11, 0.12, 0.15)   # module-1 overlaps module-0
        packages = {"module-0": "python", "module-1": "rust"}
        rows = checker.check(run.history, run.accepted, run.data, run.phases, run.end, packages)
        by_package = rows[0]["packages"]
        self.assertEqual(by_package["python"]["grants"], 1)
        self.assertEqual(by_package["rust"]["grants"], 1)
        self.assertEqual(by_package["rust"]["overlapping"], 1)
        self.assertEqual(by_package["python"]["overlapping"], 0)
        self.assertEqual(rows[0]["module"]["overlapping"], 1)

    def test_without_packages_only_the_systems_are_counted(self):
        run = Recorded()
        rows = checker.check(run.history, run.accepted, run.data, run.phases, run.end)
        self.assertEqual(dict(rows[0]["packages"]), {})
