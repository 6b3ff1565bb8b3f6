//! The commands the fuzzer sends but acquires (`acquire.rs`, `all_keys.rs`): each built
//! from random choices and applied to the model as it is built, so that what the server
//! must answer is known before it answers.

use redis::Value;

use super::acquire::Look;
use super::conn::{Conn, error_text};
use super::model::{Kind, Value as Held};
use super::{
    Expect, Fuzz, KEYS, LONG_MS, SHORT_MS, SLOTS, Slot, Via, expect_reply, key_name, show, words,
};

impl Fuzz {
    /// Builds `LOCK.RELEASE` on `k` and applies it.
    pub(crate) fn release(&mut self, k: usize) -> (Vec<Vec<u8>>, Expect) {
        self.serve(k, Look::Holder);
        let token = self.some_token(k);
        let argv = vec![b"LOCK.RELEASE".to_vec(), key_name(k), token.clone()];
        if self.model.keys[k].value == Some(Held::Str) {
            return (argv, Expect::Error("WRONGTYPE"));
        }
        let released = self.model.keys[k].release(&token);
        if released {
            self.admit(k);
        }
        (argv, Expect::Int(i64::from(released)))
    }

    /// Builds `LOCK.EXTEND` on `k` and applies it.
    pub(crate) fn extend(&mut self, k: usize) -> (Vec<Vec<u8>>, Expect) {
        self.serve(k, Look::Holder);
        let token = self.some_token(k);
        let soon = self.chance(5);
        let ttl = if soon { SHORT_MS } else { LONG_MS };
        let argv = vec![
            b"LOCK.EXTEND".to_vec(),
            key_name(k),
            token.clone(),
            ttl.to_string().into_bytes(),
        ];
        if self.model.keys[k].value == Some(Held::Str) {
            return (argv, Expect::Error("WRONGTYPE"));
        }
        let extended = self.model.keys[k].extend(&token, soon);
        (argv, Expect::Int(i64::from(extended)))
    }

    /// What a lock command on `k` does first (`look`): where the key holds no lock (a
    /// `DEL` in the running transaction put its waiters off), or for a newcomer's acquire
    /// a shared one, its waiters whose turn has come are granted, a waiter for several
    /// keys among them if every other key of it is free for it by now.
    pub(crate) fn serve(&mut self, k: usize, look: Look) {
        self.deferred.retain(|&d| d != k);
        let due = match &self.model.keys[k].value {
            None => true,
            Some(Held::Lock(_)) => {
                look == Look::Newcomer && self.model.keys[k].held_kind() != Some(Kind::Exclusive)
            }
            Some(Held::Str) => false,
        };
        if due {
            self.admit(k);
        }
    }

    /// Builds `DEL` or `UNLINK` of `k` and applies it (`via` a transaction: its waiters
    /// are served later, see `deferred`).
    pub(crate) fn delete(&mut self, k: usize, via: Via) -> (Vec<Vec<u8>>, Expect) {
        let command = if self.chance(50) {
            b"DEL".to_vec()
        } else {
            b"UNLINK".to_vec()
        };
        let existed = self.model.keys[k].value.take().is_some();
        if via == Via::Transaction {
            if !self.deferred.contains(&k) {
                self.deferred.push(k);
            }
        } else {
            self.admit(k);
        }
        (vec![command, key_name(k)], Expect::Int(i64::from(existed)))
    }

    /// Sends commands on `conn` (the admin's, or a slot's) and reads the replies of
    /// those that do not block.
    pub(crate) fn run(
        &mut self,
        on: Option<usize>,
        commands: &[Vec<Vec<u8>>],
        expects: &[Expect],
        via: Via,
    ) -> Result<(), String> {
        let mut replies = Vec::new();
        for (argv, expect) in commands.iter().zip(expects) {
            self.note(format!(
                "{}{}",
                on.map_or("admin: ".into(), |s| format!("slot {s}: ")),
                show(argv)
            ));
            let conn = match on {
                Some(s) => &mut self.slots[s].conn,
                None => &mut self.admin,
            };
            if matches!(expect, Expect::Blocked) {
                conn.send(argv)?;
                replies.push(Value::Nil);
            } else {
                replies.push(conn.query(argv)?);
            }
        }
        let fences = self.resolve(&replies)?;
        self.check(expects, &replies, &fences, via)
    }

    /// One command run directly by an idle client (or the admin).
    pub(crate) fn op_lock_command(&mut self) -> Result<(), String> {
        let k = self.rng.below(KEYS as u64) as usize;
        let slot = self.idle_slot();
        let (argv, expect) = match (self.rng.below(12), slot) {
            (0..=5, Some(s)) => self.acquire(s, k, Via::Direct, 0),
            (6 | 7, Some(s)) => self.acquire_all(s, Via::Direct, 0),
            (0..=9, _) => self.release(k),
            _ => self.extend(k),
        };
        let on = if self.chance(30)
            && !matches!(expect, Expect::Blocked)
            && !argv[0].starts_with(b"LOCK.ACQUIRE")
        {
            None
        } else {
            slot
        };
        self.run(on, &[argv], &[expect], Via::Direct)
    }

    /// `MULTI` with two to four lock commands (and `DEL`), then `EXEC`.
    pub(crate) fn op_transaction(&mut self) -> Result<(), String> {
        let Some(s) = self.idle_slot() else {
            return self.op_lock_command();
        };
        let count = 2 + self.rng.below(3) as usize;
        let (mut commands, mut expects) = (Vec::new(), Vec::new());
        for i in 0..count {
            let k = self.rng.below(KEYS as u64) as usize;
            let (argv, expect) = match self.rng.below(12) {
                0..=4 => self.acquire(s, k, Via::Transaction, i),
                5 | 6 => self.acquire_all(s, Via::Transaction, i),
                7 | 8 => self.release(k),
                9 => self.extend(k),
                _ => self.delete(k, Via::Transaction),
            };
            commands.push(argv);
            expects.push(expect);
        }
        for k in std::mem::take(&mut self.deferred) {
            self.admit(k);
        }
        self.note(format!("slot {s}: MULTI"));
        let conn = &mut self.slots[s].conn;
        expect_reply(conn.query(&words(&["MULTI"]))?, Value::Okay, "MULTI")?;
        for argv in &commands {
            self.note(format!("slot {s}:   {}", show(argv)));
            let queued = self.slots[s].conn.query(argv)?;
            expect_reply(
                queued,
                Value::SimpleString("QUEUED".into()),
                "a queued command",
            )?;
        }
        self.note(format!("slot {s}: EXEC"));
        let replies = match self.slots[s].conn.query(&words(&["EXEC"]))? {
            Value::Array(replies) if replies.len() == count => replies,
            other => return Err(format!("EXEC answered {other:?}")),
        };
        let fences = self.resolve(&replies)?;
        self.check(&expects, &replies, &fences, Via::Transaction)
    }

    /// `EVAL` of one lock command through `redis.call`.
    pub(crate) fn op_script(&mut self) -> Result<(), String> {
        let Some(s) = self.idle_slot() else {
            return self.op_lock_command();
        };
        if self.chance(25) {
            let (eval, expect) = self.acquire_all(s, Via::Script, 0);
            return self.run(Some(s), &[eval], &[expect], Via::Script);
        }
        let k = self.rng.below(KEYS as u64) as usize;
        let (argv, expect) = match self.rng.below(10) {
            0..=6 => self.acquire(s, k, Via::Script, 0),
            7 | 8 => self.release(k),
            _ => self.extend(k),
        };
        let mut eval = words(&[
            "EVAL",
            "return redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2))",
            "1",
        ]);
        eval.push(argv[1].clone());
        eval.push(argv[0].clone());
        eval.extend(argv[2..].iter().cloned());
        self.run(Some(s), &[eval], &[expect], Via::Script)
    }

    /// `DEL`/`UNLINK`, `PEXPIRE` (now, soon or late), `SET` over it, `RENAME`, `FLUSHDB`.
    pub(crate) fn op_keyspace(&mut self) -> Result<(), String> {
        let k = self.rng.below(KEYS as u64) as usize;
        let name = key_name(k);
        let exists = self.model.keys[k].value.is_some();
        let (argv, expect) = match self.rng.below(26) {
            0..=6 => self.delete(k, Via::Direct),
            7 | 8 => {
                self.model.keys[k].value = None;
                self.admit(k);
                (
                    vec![b"PEXPIRE".to_vec(), name, b"0".to_vec()],
                    Expect::Int(i64::from(exists)),
                )
            }
            9 | 10 => {
                if exists {
                    self.expiring.push(k);
                }
                let ms = SHORT_MS.to_string().into_bytes();
                (
                    vec![b"PEXPIRE".to_vec(), name, ms],
                    Expect::Int(i64::from(exists)),
                )
            }
            11 => {
                let ms = LONG_MS.to_string().into_bytes();
                (
                    vec![b"PEXPIRE".to_vec(), name, ms],
                    Expect::Int(i64::from(exists)),
                )
            }
            12 | 13 => {
                self.model.keys[k].value = Some(Held::Str);
                (vec![b"SET".to_vec(), name, b"plain".to_vec()], Expect::Ok)
            }
            // Where the module cannot follow key moves (Valkey 8.1 to 9.1.1), a renamed
            // session-bound lock may or may not go with its connection (docs/servers.md):
            // the model cannot tell, so such a lock is not renamed there.
            14..=18
                if !self.server.follows_key_moves()
                    && self.model.keys[k]
                        .holders()
                        .iter()
                        .any(|h| h.session.is_some()) =>
            {
                self.delete(k, Via::Direct)
            }
            14..=18 => {
                let to = (k + 1 + self.rng.below(KEYS as u64 - 1) as usize) % KEYS;
                let argv = vec![b"RENAME".to_vec(), name, key_name(to)];
                if !exists {
                    return self.run(None, &[argv], &[Expect::Error("ERR")], Via::Direct);
                }
                self.model.rename(k, to, self.server.follows_key_moves());
                self.admit(k);
                self.admit(to);
                self.asynchronous = true;
                (argv, Expect::Ok)
            }
            19 => {
                for key in &mut self.model.keys {
                    key.value = None;
                }
                self.admit_all();
                (words(&["FLUSHDB"]), Expect::Ok)
            }
            20 | 21 => self.copy(k),
            22 | 23 => return self.dump_and_restore(k),
            _ => return self.move_away(k),
        };
        self.run(None, &[argv], &[expect], Via::Direct)
    }

    /// Another key than `k`.
    fn other_key(&mut self, k: usize) -> usize {
        (k + 1 + self.rng.below(KEYS as u64 - 1) as usize) % KEYS
    }

    /// `COPY k to [REPLACE]`: `to` holds what `k` holds, the same holders with the same
    /// tokens, fences, expiries and bindings (the copy goes with the connection too);
    /// `to`'s own holders go; its waiters keep waiting behind the copy, but for those at
    /// the head of the queue that fit beside it (shared holders), who are granted.
    fn copy(&mut self, k: usize) -> (Vec<Vec<u8>>, Expect) {
        let to = self.other_key(k);
        let replace = self.chance(50);
        let mut argv = vec![b"COPY".to_vec(), key_name(k), key_name(to)];
        if replace {
            argv.push(b"REPLACE".to_vec());
        }
        let copied =
            self.model.keys[k].value.is_some() && (replace || self.model.keys[to].value.is_none());
        if copied {
            self.model.copy(k, to);
            self.admit(to);
            self.asynchronous = true;
            *self.seen.entry("copies").or_default() += 1;
        }
        (argv, Expect::Int(i64::from(copied)))
    }

    /// `MOVE k 1`: the key leaves the model's database (after what an earlier move left
    /// in database 1 under that name is deleted there: a session-bound lock that went
    /// with its key is forgotten again); its waiters are granted. What is moved is no
    /// longer the model's to check.
    fn move_away(&mut self, k: usize) -> Result<(), String> {
        let name = key_name(k);
        self.note(format!("admin: SELECT 1, DEL fz:{k}, SELECT 0"));
        for argv in [
            words(&["SELECT", "1"]),
            vec![b"DEL".to_vec(), name.clone()],
            words(&["SELECT", "0"]),
        ] {
            if let Some(err) = error_text(&self.admin.query(&argv)?) {
                return Err(format!("{}: {err}", show(&argv)));
            }
        }
        let moved = self.model.keys[k].value.take().is_some();
        if moved {
            self.admit(k);
            self.asynchronous = true;
            *self.seen.entry("moves").or_default() += 1;
        }
        let argv = vec![b"MOVE".to_vec(), name, b"1".to_vec()];
        self.run(None, &[argv], &[Expect::Int(i64::from(moved))], Via::Direct)
    }

    /// `DUMP k`, then `RESTORE to ttl payload [REPLACE]` (`to` may be `k`): as a `COPY`,
    /// with the key's TTL the `RESTORE` gives; on this same running server a holder's
    /// binding stays with its connection if that is still open, and a closed one's grace
    /// starts again (the fuzzer's graces outlast the run).
    fn dump_and_restore(&mut self, k: usize) -> Result<(), String> {
        let to = if self.chance(30) {
            k
        } else {
            self.other_key(k)
        };
        let dump = vec![b"DUMP".to_vec(), key_name(k)];
        self.note(format!("admin: {}", show(&dump)));
        let payload = match self.admin.query(&dump)? {
            Value::BulkString(payload) if self.model.keys[k].value.is_some() => payload,
            Value::Nil if self.model.keys[k].value.is_none() => return Ok(()),
            other => return Err(format!("DUMP fz:{k} answered {other:?}")),
        };
        let replace = self.chance(70);
        let ttl = LONG_MS.to_string().into_bytes();
        let mut argv = vec![b"RESTORE".to_vec(), key_name(to), ttl, payload];
        if replace {
            argv.push(b"REPLACE".to_vec());
        }
        let expect = if replace || self.model.keys[to].value.is_none() {
            self.model.copy(k, to);
            self.admit(to);
            self.asynchronous = true;
            *self.seen.entry("restores").or_default() += 1;
            Expect::Ok
        } else {
            Expect::Error("BUSYKEY")
        };
        self.run(None, &[argv], &[expect], Via::Direct)
    }

    /// A client goes: `CLIENT KILL ID`, `CLIENT KILL ADDR`, `QUIT`, a closed socket, or
    /// every client at once (`CLIENT KILL TYPE normal`). Each slot reconnects.
    pub(crate) fn op_disconnect(&mut self) -> Result<(), String> {
        let s = self.rng.below(SLOTS as u64) as usize;
        let id = self.slots[s].conn.id;
        let gone: Vec<usize> = match self.rng.below(9) {
            0..=2 => {
                self.note(format!("admin: CLIENT KILL ID {id} (slot {s})"));
                let killed =
                    self.admin
                        .query(&words(&["CLIENT", "KILL", "ID", &id.to_string()]))?;
                expect_reply(killed, Value::Int(1), "CLIENT KILL ID")?;
                vec![s]
            }
            3 | 4 => {
                let addr = self.slots[s].conn.addr();
                self.note(format!("admin: CLIENT KILL ADDR {addr} (slot {s})"));
                let killed = self
                    .admin
                    .query(&words(&["CLIENT", "KILL", "ADDR", &addr]))?;
                expect_reply(killed, Value::Int(1), "CLIENT KILL ADDR")?;
                vec![s]
            }
            5 if self.slots[s].blocked.is_none() => {
                self.note(format!("slot {s}: QUIT"));
                let quit = self.slots[s].conn.query(&words(&["QUIT"]))?;
                expect_reply(quit, Value::Okay, "QUIT")?;
                vec![s]
            }
            8 => {
                self.note("admin: CLIENT KILL TYPE normal".into());
                let killed = self
                    .admin
                    .query(&words(&["CLIENT", "KILL", "TYPE", "normal"]))?;
                if !matches!(killed, Value::Int(n) if n >= SLOTS as i64) {
                    return Err(format!("CLIENT KILL TYPE normal answered {killed:?}"));
                }
                (0..SLOTS).collect()
            }
            _ => {
                self.note(format!("slot {s}: closes its socket"));
                vec![s]
            }
        };
        let ids: Vec<i64> = gone.iter().map(|&s| self.slots[s].conn.id).collect();
        for &s in &gone {
            self.slots[s] = Slot {
                conn: Conn::open(self.port),
                blocked: None,
            };
        }
        for id in ids {
            self.model.disconnect(id);
        }
        // A waiter that leaves the head of a queue may let the ones behind it in.
        self.admit_all();
        self.asynchronous = true;
        self.resolve(&[]).map(|_| ())
    }
}
