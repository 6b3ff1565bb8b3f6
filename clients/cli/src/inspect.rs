//! `redis-lock status [KEY ...]` and `redis-lock status --contended`: who holds what.

use crate::args::StatusArgs;
use crate::connect::Connect;
use crate::exit::Failure;
use crate::render;
use crate::status::{self, LockStatus};

pub fn status(args: StatusArgs, connect: &Connect) -> Result<u8, Failure> {
    let target = connect.target()?;
    let mut waited = Vec::new();
    let keys: Vec<String> = if args.contended {
        for mut master in target.masters(connect.timeout)? {
            waited.extend(status::contended(&mut master, args.count)?);
        }
        // The longest-waiting first across every master, at most COUNT of them.
        waited.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        waited.truncate(args.count as usize);
        waited.iter().map(|(key, _)| key.clone()).collect()
    } else if args.keys.is_empty() {
        let mut keys = Vec::new();
        for mut master in target.masters(connect.timeout)? {
            keys.extend(status::all_locks(&mut master)?);
        }
        keys.sort();
        keys
    } else {
        args.keys.clone()
    };
    let mut con = target.connection(connect.timeout)?;
    let mut statuses: Vec<LockStatus> = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        let mut lock = status::fetch(con.as_mut(), key)?;
        if args.contended {
            lock.waited_ms = Some(waited[i].1);
        }
        statuses.push(lock);
    }
    if args.json {
        print!("{}", render::json(&statuses));
    } else if statuses.is_empty() {
        println!(
            "{}",
            if args.contended {
                "no lock has waiters"
            } else {
                "no locks"
            }
        );
    } else {
        print!("{}", render::table(&statuses));
    }
    Ok(0)
}
