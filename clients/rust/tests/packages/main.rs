#[path = "../common/mod.rs"]
mod common;
mod conformance;
mod docs_snippets;
mod node_package;
mod other_languages;
mod python_package;
mod redis_py_lock_suite;
