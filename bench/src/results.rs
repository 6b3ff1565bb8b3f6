//! What a run produces: one `Metric` per compared figure (the module's and the recipe's
//! value in each round), the contention detail, and notes; and how a metric is judged.

use crate::cpu::CpuUse;
use crate::sides::Side;
use crate::stats::median;

/// Which way a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

/// A target of the issue for one figure.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// module / recipe at most this.
    RatioAtMost(f64),
    /// module / recipe at least this.
    RatioAtLeast(f64),
    /// The module's own figure below this.
    ModuleBelow(f64),
    /// The module's own figure at most this.
    ModuleAtMost(f64),
}

impl Target {
    /// The target as the table prints it.
    pub fn describe(self, unit: &str) -> String {
        match self {
            Target::RatioAtMost(r) => format!("ratio <= {r}"),
            Target::RatioAtLeast(r) => format!("ratio >= {r}"),
            Target::ModuleBelow(v) => format!("module < {v} {unit}"),
            Target::ModuleAtMost(v) => format!("module <= {v} {unit}"),
        }
    }
}

/// One figure measured on both sides, each round.
#[derive(Debug, Clone)]
pub struct Metric {
    /// The scenario, as numbered in the issue (`1. uncontended acquire`).
    pub scenario: String,
    /// What is measured (`ops/s, one connection`).
    pub what: String,
    /// Unit of the values.
    pub unit: String,
    /// What the recipe side is (`SET NX PX`, `poll 5 ms`).
    pub recipe_label: String,
    /// The module's value in each round.
    pub module: Vec<f64>,
    /// The recipe's value in each round.
    pub recipe: Vec<f64>,
    /// CPU use of generator and server in the module's rounds (where measured).
    pub module_cpu: Vec<CpuUse>,
    /// The same in the recipe's rounds.
    pub recipe_cpu: Vec<CpuUse>,
    /// Which way is better.
    pub better: Better,
    /// The issue's target, if it sets one.
    pub target: Option<Target>,
}

/// How a metric fares against its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    NoTarget,
    NotChecked,
}

impl Metric {
    /// A metric with no rounds yet.
    pub fn new(scenario: &str, what: &str, unit: &str, recipe_label: &str, better: Better) -> Self {
        Metric {
            scenario: scenario.into(),
            what: what.into(),
            unit: unit.into(),
            recipe_label: recipe_label.into(),
            module: Vec::new(),
            recipe: Vec::new(),
            module_cpu: Vec::new(),
            recipe_cpu: Vec::new(),
            better,
            target: None,
        }
    }

    /// The same metric with a target.
    pub fn target(mut self, target: Target) -> Self {
        self.target = Some(target);
        self
    }

    /// Records one round's value of `side`, with the CPU use while it was measured.
    pub fn push(&mut self, side: Side, value: f64, cpu: Option<CpuUse>) {
        let (values, cpus) = match side {
            Side::Module => (&mut self.module, &mut self.module_cpu),
            Side::Recipe => (&mut self.recipe, &mut self.recipe_cpu),
        };
        values.push(value);
        cpus.extend(cpu);
    }

    /// Median CPU use (generator, server) of `side`'s rounds, if measured.
    pub fn cpu_median(&self, side: Side) -> Option<CpuUse> {
        let cpus = match side {
            Side::Module => &self.module_cpu,
            Side::Recipe => &self.recipe_cpu,
        };
        if cpus.is_empty() {
            return None;
        }
        let generator: Vec<f64> = cpus.iter().map(|c| c.generator).collect();
        let server: Vec<f64> = cpus.iter().map(|c| c.server).collect();
        Some(CpuUse {
            generator: median(&generator),
            server: median(&server),
        })
    }

    /// Median of the module's rounds.
    pub fn module_median(&self) -> f64 {
        median(&self.module)
    }

    /// Median of the recipe's rounds.
    pub fn recipe_median(&self) -> f64 {
        median(&self.recipe)
    }

    /// module / recipe of the medians; NaN when the recipe's is zero or missing.
    pub fn ratio(&self) -> f64 {
        let recipe = self.recipe_median();
        if recipe == 0.0 || recipe.is_nan() {
            f64::NAN
        } else {
            self.module_median() / recipe
        }
    }

    /// Whether the target is met (never judged in a smoke run).
    pub fn verdict(&self, smoke: bool) -> Verdict {
        let Some(target) = self.target else {
            return Verdict::NoTarget;
        };
        if smoke {
            return Verdict::NotChecked;
        }
        let module = self.module_median();
        let met = match target {
            Target::RatioAtMost(r) => self.ratio() <= r,
            Target::RatioAtLeast(r) => self.ratio() >= r,
            Target::ModuleBelow(v) => module < v,
            Target::ModuleAtMost(v) => module <= v,
        };
        if met { Verdict::Met } else { Verdict::Missed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(module: &[f64], recipe: &[f64], target: Target) -> Metric {
        let mut m = Metric::new("s", "w", "u", "r", Better::Higher).target(target);
        m.module = module.to_vec();
        m.recipe = recipe.to_vec();
        m
    }

    #[test]
    fn ratio_targets_compare_the_medians() {
        let m = metric(
            &[13.0, 14.0, 100.0],
            &[10.0, 10.0, 1.0],
            Target::RatioAtLeast(1.3),
        );
        assert!((m.ratio() - 1.4).abs() < 1e-9);
        assert_eq!(m.verdict(false), Verdict::Met);
        assert_eq!(m.verdict(true), Verdict::NotChecked);
        let m = metric(&[12.0], &[10.0], Target::RatioAtMost(1.1));
        assert_eq!(m.verdict(false), Verdict::Missed);
    }

    #[test]
    fn absolute_targets_judge_the_module_alone() {
        let m = metric(&[90.0], &[0.0], Target::ModuleBelow(100.0));
        assert!(m.ratio().is_nan());
        assert_eq!(m.verdict(false), Verdict::Met);
    }
}
