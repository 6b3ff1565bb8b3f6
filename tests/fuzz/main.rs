#[path = "../common/mod.rs"]
mod common;
mod model_fuzz;
mod restore_fuzz;
