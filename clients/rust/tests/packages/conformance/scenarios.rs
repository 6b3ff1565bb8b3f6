//! `clients/conformance/scenarios.txt` read into scenarios, and what a step's outcome
//! must be: the Rust side of the format the file describes (the other drivers read it
//! the same way).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance")
}

pub struct Step {
    pub text: String,
    pub words: Vec<String>,
    expected: Option<String>,
    overrides: HashMap<String, String>,
}

impl Step {
    /// What `package` must answer (its override where its peer's idiom differs; `7.0`:
    /// where the server cannot wait for its replicas itself, and the package waits).
    pub fn expected(&self, package: &str, waits_itself: bool) -> Option<&str> {
        self.overrides
            .get(package)
            .or(self.overrides.get("7.0").filter(|_| waits_itself))
            .or(self.expected.as_ref())
            .map(String::as_str)
    }
}

pub struct Scenario {
    pub name: String,
    pub needs: Vec<String>,
    pub steps: Vec<Step>,
}

pub fn parse(text: &str) -> Vec<Scenario> {
    let mut scenarios: Vec<Scenario> = Vec::new();
    for line in text.lines().map(str::trim_end) {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix("scenario ") {
            scenarios.push(Scenario {
                name: name.trim().to_string(),
                needs: Vec::new(),
                steps: Vec::new(),
            });
            continue;
        }
        let scenario = scenarios.last_mut().expect("a step before any scenario");
        if let Some(need) = trimmed.strip_prefix("needs ") {
            scenario.needs.push(need.trim().to_string());
            continue;
        }
        let (step, expected) = match trimmed.split_once(" -> ") {
            Some((step, expected)) => (step, Some(expected.trim().to_string())),
            None => (trimmed, None),
        };
        let mut expected = expected;
        let mut overrides = HashMap::new();
        while let Some(text) = expected.clone().filter(|e| e.ends_with(']')) {
            let Some(open) = text.rfind('[') else { break };
            let (package, outcome) = text[open + 1..text.len() - 1]
                .split_once(':')
                .expect("an override is [package: outcome]");
            overrides.insert(package.trim().to_string(), outcome.trim().to_string());
            expected = Some(text[..open].trim().to_string());
        }
        scenario.steps.push(Step {
            text: step.to_string(),
            words: step.split_whitespace().map(str::to_string).collect(),
            expected,
            overrides,
        });
    }
    scenarios
}

/// Whether `got` is what `expected` says (`between lo hi` for a number in a range).
pub fn matches(got: &str, expected: &str) -> bool {
    let words: Vec<&str> = expected.split_whitespace().collect();
    if words.first() == Some(&"between") {
        let (Ok(got), Ok(lo), Ok(hi)) = (
            got.parse::<f64>(),
            words[1].parse::<f64>(),
            words[2].parse::<f64>(),
        ) else {
            return false;
        };
        return lo <= got && got <= hi;
    }
    got == expected
}

/// `wait 5000 watchdog retries 2` as pairs; `watchdog` alone answers 1.
pub fn options(words: &[String]) -> HashMap<String, u64> {
    let mut found = HashMap::new();
    let mut i = 0;
    while i < words.len() {
        if words[i] == "watchdog" {
            found.insert("watchdog".to_string(), 1);
            i += 1;
        } else {
            found.insert(words[i].clone(), words[i + 1].parse().expect("a number"));
            i += 2;
        }
    }
    found
}
