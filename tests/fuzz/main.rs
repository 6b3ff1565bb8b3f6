#[path = "../common/mod.rs"]
mod common;
mod lock_do_fuzz;
mod model_fuzz;
mod restore_fuzz;
