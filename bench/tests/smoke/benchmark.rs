//! The benchmark runs end to end in its smoke mode (tiny sizes, a few seconds), so that
//! `make test` and CI keep it from rotting. The full run is `make bench`; no target is
//! judged here, only that every scenario measured both sides and the results were written.

use std::fs;

use redis_lock_bench::Config;

#[test]
fn a_smoke_run_measures_every_scenario_on_both_sides_and_writes_the_results() {
    let out = std::env::temp_dir().join(format!("redis-lock-bench-smoke-{}", std::process::id()));
    let cfg = Config::smoke(redis_lock_testkit::module_path(), out.clone());
    let report = redis_lock_bench::run(&cfg).expect("smoke run of the benchmark");

    for scenario in [
        "1.", "2.", "3.", "4.", "5.", "6.", "7.", "8.", "11.", "12.", "13.",
    ] {
        assert!(
            report
                .metrics
                .iter()
                .any(|m| m.scenario.starts_with(scenario)),
            "scenario {scenario} missing from the report"
        );
    }
    for m in &report.metrics {
        let what = format!("{} / {}", m.scenario, m.what);
        assert_eq!(m.module.len(), m.recipe.len(), "{what}: rounds differ");
        assert!(!m.module.is_empty(), "{what}: no rounds");
        assert!(
            m.module_median().is_finite(),
            "{what}: module {:?}",
            m.module
        );
        assert!(!m.recipe_median().is_nan(), "{what}: recipe {:?}", m.recipe);
    }
    assert!(report.missed().is_empty(), "a smoke run judges no target");
    // Where callgrind counted instructions, the API's floor was counted too (the floor
    // module is built beside ours by `make test` and `make bench`).
    let counted = |what: &str| report.metrics.iter().any(|m| m.what.contains(what));
    if counted("callgrind") {
        for floor in ["FLOOR.SETNX", "FLOOR.DELIFEQ", "FLOOR.NOOP", "FLOOR.DO"] {
            assert!(counted(floor), "no {floor} in the instruction counts");
        }
    }

    // Where the server waits for its replicas (scenario 14's raw REPLICAS 1 ran), every
    // package was measured against it: the drivers of bench/drivers/ ran.
    let scenario = |name: &str| report.metrics.iter().any(|m| m.scenario == name);
    if scenario("14. replicas (raw client)") {
        for package in ["Rust", "Python", "Node", "PHP"] {
            let name = format!("14. replicas ({package} package, defaults)");
            assert!(scenario(&name), "{name} missing from the report");
        }
    }

    // The report names the server it measured (REDIS_SERVER, as for `make test`).
    let version = std::process::Command::new(redis_lock_bench::server::binary())
        .arg("--version")
        .output()
        .expect("the server's --version");
    let version = String::from_utf8_lossy(&version.stdout);
    let named = version
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        named.contains(" v=") && report.machine.contains(&named),
        "the report does not name {named:?}: {}",
        report.machine
    );

    let module_points = report
        .contention
        .iter()
        .filter(|p| p.waiting.label() == "module WAIT");
    for point in module_points {
        for sample in &point.samples {
            assert_eq!(sample.overlaps, 0, "two holders at once");
            assert!(sample.sections_per_s > 0.0, "no critical section completed");
        }
    }

    let files = report.write().expect("write the results");
    for file in &files {
        let text = fs::read_to_string(file).expect("results file");
        assert!(text.contains("uncontended acquire"), "{}", file.display());
    }
    let _ = fs::remove_dir_all(out);
}
