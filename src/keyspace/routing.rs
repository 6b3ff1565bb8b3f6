//! Where a waiter's key is served now, asked of the server: in cluster mode a grant made
//! outside a command (when a lock is freed, long after the waiter's command passed the
//! server's own checks) first reads `CLUSTER NODES`; the core decides the route from it
//! (`lock_core::cluster`).

use redis_module::{Context, ContextFlags};

use lock_core::cluster::{self, Route};

/// Where `key` is served: always `Local` outside cluster mode.
pub fn route(ctx: &Context, key: &[u8]) -> Route {
    if !ctx.get_flags().contains(ContextFlags::CLUSTER) {
        return Route::Local;
    }
    let slot = cluster::key_slot(key);
    match ctx.call("CLUSTER", &["NODES"]).map(String::try_from) {
        Ok(Ok(nodes)) => cluster::route_in(&nodes, slot),
        _ => Route::Local,
    }
}
