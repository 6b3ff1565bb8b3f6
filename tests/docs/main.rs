#[path = "../cluster_common/mod.rs"]
mod cluster_common;
#[path = "../common/mod.rs"]
mod common;
mod dist;
mod pages;
mod setup;
