//! `LOCK.HOLDERS key`: who holds a lock, never the token: each holder's fence, ttl,
//! acquired, client (the `CLIENT ID` it was granted to here, 0 when it came from
//! elsewhere), session, connected and value, oldest grant first.

use std::time::Duration;

use redis::Value;

use crate::common::{
    TestServer, Waiter, acquire, assert_no_token_in, client_id, error_of, poll_until, release,
    start_replica, sync_replicas,
};

/// One holder as `LOCK.HOLDERS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holder {
    fence: i64,
    ttl: i64,
    acquired: i64,
    client: i64,
    session: i64,
    connected: i64,
    value: Option<Vec<u8>>,
}

/// The fields of one holder's map (RESP3) or flat field/value array (RESP2), in order.
fn pairs(value: &Value) -> Vec<(String, Value)> {
    match value {
        Value::Array(items) => items
            .chunks(2)
            .map(|p| (redis::from_redis_value(p[0].clone()).unwrap(), p[1].clone()))
            .collect(),
        Value::Map(items) => items
            .iter()
            .map(|(k, v)| (redis::from_redis_value(k.clone()).unwrap(), v.clone()))
            .collect(),
        other => panic!("a holder: {other:?}"),
    }
}

fn parse(reply: &Value) -> Option<Vec<Holder>> {
    let Value::Array(holders) = reply else {
        assert_eq!(*reply, Value::Nil, "nil or an array");
        return None;
    };
    Some(
        holders
            .iter()
            .map(|h| {
                let fields = pairs(h);
                let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
                assert_eq!(
                    names,
                    [
                        "fence",
                        "ttl",
                        "acquired",
                        "client",
                        "session",
                        "connected",
                        "value"
                    ]
                );
                let int =
                    |i: usize| -> i64 { redis::from_redis_value(fields[i].1.clone()).unwrap() };
                Holder {
                    fence: int(0),
                    ttl: int(1),
                    acquired: int(2),
                    client: int(3),
                    session: int(4),
                    connected: int(5),
                    value: redis::from_redis_value(fields[6].1.clone()).unwrap(),
                }
            })
            .collect(),
    )
}

fn holders_reply(con: &mut redis::Connection, key: &str) -> Value {
    redis::cmd("LOCK.HOLDERS")
        .arg(key)
        .query(con)
        .expect("LOCK.HOLDERS")
}

fn holders(con: &mut redis::Connection, key: &str) -> Option<Vec<Holder>> {
    parse(&holders_reply(con, key))
}

/// The clients `LOCK.HOLDERS` names for `key`, oldest grant first.
fn clients(con: &mut redis::Connection, key: &str) -> Vec<i64> {
    holders(con, key)
        .unwrap_or_default()
        .iter()
        .map(|h| h.client)
        .collect()
}

#[test]
fn an_absent_key_is_nil_and_a_key_of_another_type_is_wrongtype() {
    let server = TestServer::start();
    let mut con = server.connection();
    assert_eq!(holders(&mut con, "nothing"), None);
    let () = redis::cmd("SET")
        .arg("text")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let err = error_of(redis::cmd("LOCK.HOLDERS").arg("text").query(&mut con));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    let err = error_of(redis::cmd("LOCK.HOLDERS").query(&mut con));
    assert!(err.contains("wrong number of arguments"), "{err}");
    let err = error_of(redis::cmd("LOCK.HOLDERS").arg("a").arg("b").query(&mut con));
    assert!(err.contains("wrong number of arguments"), "{err}");
}

#[test]
fn an_exclusive_holder_names_its_connection_which_client_list_finds() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut worker = server.connection();
    let () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("billing-worker-7")
        .query(&mut worker)
        .unwrap();
    let id = client_id(&mut worker);
    let before = crate::common::now_ms();
    let (token, fence) = acquire(&mut worker, "orders:1", 30_000, &[]).unwrap();
    let reply = holders_reply(&mut con, "orders:1");
    assert_no_token_in("LOCK.HOLDERS", format!("{reply:?}").as_bytes(), &[&token]);
    let [holder] = &holders(&mut con, "orders:1").unwrap()[..] else {
        panic!("one holder");
    };
    assert_eq!(holder.fence, fence);
    assert_eq!(holder.client, id);
    assert!((29_000..=30_000).contains(&holder.ttl), "{holder:?}");
    assert!(holder.acquired >= before - 1000, "{holder:?}");
    assert_eq!(
        (holder.session, holder.connected, holder.value.clone()),
        (-1, -1, None)
    );

    let listed: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(holder.client)
        .query(&mut con)
        .unwrap();
    assert!(listed.contains("name=billing-worker-7"), "{listed}");
    assert_eq!(release(&mut worker, "orders:1", &token), 1);
    assert_eq!(holders(&mut con, "orders:1"), None);
}

#[test]
fn resp3_gives_one_map_per_holder() {
    let server = TestServer::start();
    let mut con = server.connection_resp3();
    acquire(&mut con, "k", 10_000, &["VALUE", "10.0.0.7:8080"]).unwrap();
    let Value::Array(holders) = holders_reply(&mut con, "k") else {
        panic!("an array");
    };
    assert!(matches!(holders[0], Value::Map(_)), "{holders:?}");
    let [holder] = &parse(&Value::Array(holders)).unwrap()[..] else {
        panic!("one holder");
    };
    assert_eq!(holder.value.as_deref(), Some(&b"10.0.0.7:8080"[..]));
}

#[test]
fn shared_holders_are_listed_oldest_grant_first_each_with_its_own_connection() {
    let server = TestServer::start();
    let mut cons: Vec<redis::Connection> = (0..3).map(|_| server.connection()).collect();
    let ids: Vec<i64> = cons.iter_mut().map(client_id).collect();
    let mut fences = Vec::new();
    for (i, con) in cons.iter_mut().enumerate() {
        let ttl = 20_000 - 5_000 * i as u64;
        let (_, fence) = acquire(con, "room", ttl, &["LIMIT", "5"]).unwrap();
        fences.push(fence);
    }
    let listed = holders(&mut cons[0], "room").unwrap();
    assert_eq!(listed.iter().map(|h| h.fence).collect::<Vec<_>>(), fences);
    assert_eq!(listed.iter().map(|h| h.client).collect::<Vec<_>>(), ids);
    assert!(
        listed[0].ttl > listed[2].ttl,
        "each holder's own ttl: {listed:?}"
    );
    assert!(listed.iter().all(|h| h.value.is_none() && h.session == -1));
}

#[test]
fn a_session_bound_holder_shows_its_grace_and_whether_its_connection_is_open() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut worker = server.connection();
    let id = client_id(&mut worker);
    acquire(&mut worker, "job", 60_000, &["SESSION", "30000"]).unwrap();
    let [holder] = &holders(&mut con, "job").unwrap()[..] else {
        panic!("one holder");
    };
    assert_eq!(
        (holder.client, holder.session, holder.connected),
        (id, 30_000, 1)
    );
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(&mut con)
        .unwrap();
    assert_eq!(killed, 1);
    poll_until(Duration::from_secs(10), "the grace to start", || {
        holders(&mut con, "job").unwrap()[0].connected == 0
    });
    let [holder] = &holders(&mut con, "job").unwrap()[..] else {
        panic!("one holder");
    };
    assert_eq!((holder.client, holder.session), (id, 30_000));
}

#[test]
fn a_waiter_granted_the_lock_is_named_by_its_own_connection() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (token, _) = acquire(&mut con, "k", 60_000, &[]).unwrap();
    let mut waiter = Waiter::start(&server, "k", 60_000, &["WAIT", "0"]);
    assert_eq!(release(&mut con, "k", &token), 1);
    let (_, fence) = waiter.granted().expect("granted");
    let [holder] = &holders(&mut con, "k").unwrap()[..] else {
        panic!("one holder");
    };
    assert_eq!((holder.fence, holder.client), (fence, waiter.id));
}

#[test]
fn a_reacquire_from_another_connection_names_that_one_and_a_script_names_none() {
    let server = TestServer::start();
    let mut first = server.connection();
    let mut second = server.connection();
    let (first_id, second_id) = (client_id(&mut first), client_id(&mut second));
    acquire(&mut first, "k", 60_000, &["TOKEN", "t"]).unwrap();
    assert_eq!(clients(&mut second, "k"), [first_id]);
    acquire(&mut second, "k", 60_000, &["TOKEN", "t"]).unwrap();
    assert_eq!(clients(&mut second, "k"), [second_id]);
    // A re-acquire inside a script leaves the connection named as it was.
    let _: Value = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 60000, 'TOKEN', 't')")
        .arg(1)
        .arg("k")
        .query(&mut first)
        .unwrap();
    assert_eq!(clients(&mut second, "k"), [second_id]);
    // A grant inside a script names no connection: the module API does not say which.
    let _: Value = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 60000)")
        .arg(1)
        .arg("scripted")
        .query(&mut first)
        .unwrap();
    assert_eq!(clients(&mut second, "scripted"), [0]);
    // Inside MULTI/EXEC the connection that ran EXEC.
    let _: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("queued")
        .arg(60_000)
        .query(&mut first)
        .unwrap();
    assert_eq!(clients(&mut second, "queued"), [first_id]);
}

#[test]
fn rename_move_and_copy_keep_the_client_and_whatever_arrives_from_outside_has_none() {
    let server = TestServer::start();
    let mut con = server.connection();
    let id = client_id(&mut con);
    for (key, extra) in [("plain", &[][..]), ("bound", &["SESSION", "5000"][..])] {
        acquire(&mut con, key, 60_000, extra).unwrap();
        let () = redis::cmd("RENAME")
            .arg(key)
            .arg(format!("{key}:renamed"))
            .query(&mut con)
            .unwrap();
        assert_eq!(clients(&mut con, &format!("{key}:renamed")), [id], "{key}");
        let copied: i64 = redis::cmd("COPY")
            .arg(format!("{key}:renamed"))
            .arg(format!("{key}:copy"))
            .query(&mut con)
            .unwrap();
        assert_eq!(copied, 1);
        assert_eq!(clients(&mut con, &format!("{key}:copy")), [id], "{key}");
        let moved: i64 = redis::cmd("MOVE")
            .arg(format!("{key}:renamed"))
            .arg(1)
            .query(&mut con)
            .unwrap();
        assert_eq!(moved, 1);
        let () = redis::cmd("SELECT").arg(1).query(&mut con).unwrap();
        assert_eq!(clients(&mut con, &format!("{key}:renamed")), [id], "{key}");
        let () = redis::cmd("SELECT").arg(0).query(&mut con).unwrap();

        let dumped: Vec<u8> = redis::cmd("DUMP")
            .arg(format!("{key}:copy"))
            .query(&mut con)
            .unwrap();
        let () = redis::cmd("RESTORE")
            .arg(format!("{key}:restored"))
            .arg(0)
            .arg(dumped)
            .query(&mut con)
            .unwrap();
        assert_eq!(clients(&mut con, &format!("{key}:restored")), [0], "{key}");
    }
    let () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(clients(&mut con, "plain:copy"), [0], "loaded");
    assert_eq!(clients(&mut con, "bound:copy"), [0], "loaded");
}

#[test]
fn a_replica_answers_with_client_zero() {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let mut con = master.connection();
    let (_, fence) = acquire(&mut con, "k", 60_000, &["VALUE", "v"]).unwrap();
    acquire(&mut con, "shared", 60_000, &["SHARED"]).unwrap();
    sync_replicas(&mut con, 1);
    let mut on_replica = replica.connection();
    let [holder] = &holders(&mut on_replica, "k").unwrap()[..] else {
        panic!("one holder");
    };
    assert_eq!((holder.fence, holder.client), (fence, 0));
    assert_eq!(holder.value.as_deref(), Some(&b"v"[..]));
    assert_eq!(clients(&mut on_replica, "shared"), [0]);
    // Promoted, it names no connection of its own for what it had.
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut on_replica)
        .unwrap();
    assert_eq!(clients(&mut on_replica, "k"), [0]);
    let mut promoted = replica.connection();
    let id = client_id(&mut promoted);
    acquire(&mut promoted, "new", 60_000, &[]).unwrap();
    assert_eq!(clients(&mut on_replica, "new"), [id]);
}

#[test]
fn every_lock_names_its_connection_when_thousands_of_connections_hold_locks() {
    // A compact lock names its connection by a slot, of which there are about 2,000; the
    // connections past them are named by a lock kept in an allocation of its own.
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut holders_of: Vec<(redis::Connection, i64)> = Vec::new();
    for i in 0..2_100 {
        let mut con = server.connection();
        let id = client_id(&mut con);
        acquire(&mut con, &format!("k{i}"), 60_000, &[]).unwrap();
        holders_of.push((con, id));
    }
    for (i, (_, id)) in holders_of.iter().enumerate() {
        assert_eq!(clients(&mut admin, &format!("k{i}")), [*id], "k{i}");
    }
    // Released, the slots serve the next connections.
    drop(holders_of);
    // Freed on the server's background thread.
    let () = redis::cmd("FLUSHALL")
        .arg("ASYNC")
        .query(&mut admin)
        .unwrap();
    let mut late = server.connection();
    let id = client_id(&mut late);
    acquire(&mut late, "late", 60_000, &[]).unwrap();
    assert_eq!(clients(&mut admin, "late"), [id]);
}
