#[path = "../cluster_common/mod.rs"]
mod cluster_common;
#[path = "../common/mod.rs"]
mod common;
mod dist;
#[path = "../docs_common/mod.rs"]
mod docs_common;
mod pages;
mod setup;
