//! What the previous release saved loads under the module under test.

use crate::locks::{self, check, make_every_kind, release_and_go_on};
use crate::previous;

#[test]
fn the_previous_releases_rdb_and_aof_load_with_every_lock_intact() {
    let old = previous::module();
    let mut server = locks::server_with(&old, &[]);
    let mut con = server.connection();
    let (made, waiter) = make_every_kind(&server);
    let () = redis::cmd("SAVE").query(&mut con).expect("SAVE");
    drop(waiter);
    drop(con);
    server.stop();

    // Its RDB (no AOF: the RDB is what loads), under the module under test.
    server.restart_with(&[]);
    let mut con = server.connection();
    check(&mut con, &made, "from the RDB");
    release_and_go_on(&mut con, &made, "from the RDB");
    drop(con);
    // Nothing of that is written: no save points, no AOF.
    server.stop();

    // Its AOF, replayed command by command.
    server.restart_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut con = server.connection();
    check(&mut con, &made, "from the AOF");
    release_and_go_on(&mut con, &made, "from the AOF");
    assert!(
        server
            .log()
            .contains(&format!("redis-lock {}", env!("CARGO_PKG_VERSION"))),
        "the module under test loaded them"
    );
}
