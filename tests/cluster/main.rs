mod atomic_migration;
#[path = "../cluster_common/mod.rs"]
mod cluster_common;
#[path = "../common/mod.rs"]
mod common;
mod failover;
mod resharding;
mod routing;
mod sessions;
