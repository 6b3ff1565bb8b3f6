//! The model fuzzer: random command sequences over a few keys and clients, each reply and
//! the server's state after each step checked against a model of the contract
//! (`model_fuzz/model.rs`): who holds what, fences that only grow, waiters served first
//! come first served, session-bound locks released with their connection.
//!
//! The sequences mix `LOCK.ACQUIRE` (any options, blocking or not), `LOCK.RELEASE`,
//! `LOCK.EXTEND` and `LOCK.INFO` with `DEL`, `UNLINK`, `PEXPIRE`, `RENAME`, `SET`,
//! `FLUSHDB`, `MULTI`/`EXEC`, `EVAL` and clients that go (`CLIENT KILL` by id, address or
//! type, `QUIT`, a closed socket). One step runs at a time, so every outcome is decided:
//! a grant the model expects must come, with a fence above every fence before on the key,
//! and nothing else may arrive. A replica follows; its digest must equal the master's.
//!
//! `make test` runs a few thousand steps on every server; `make fuzz` many more
//! (`MODEL_FUZZ_STEPS`). A failure prints its seed, and `MODEL_FUZZ_SEED` replays it.

mod common;
#[path = "model_fuzz/conn.rs"]
mod conn;
#[path = "model_fuzz/model.rs"]
mod model;

use std::collections::{HashMap, VecDeque};
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use common::{Rng, ServerKind, TestServer, server_kind, start_replica};
use conn::{Conn, REPLY_LIMIT, error_text, grant_of};
use model::{Binding, Holder, Kind, Model, Outcome, Value as Held, Waiting};

const KEYS: usize = 3;
const SLOTS: usize = 5;
/// TTLs and graces that outlast any run: only the fuzzer's short ones expire.
const LONG_MS: i64 = 600_000;
/// A TTL the fuzzer lets run out before its next step.
const SHORT_MS: i64 = 40;

fn key_name(k: usize) -> Vec<u8> {
    format!("fz:{k}").into_bytes()
}

fn words(argv: &[&str]) -> Vec<Vec<u8>> {
    argv.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// What one reply must be.
#[derive(Debug, Clone)]
enum Expect {
    /// `[token, fence]`, a new grant: the pending grant with this placeholder fence.
    Grant(i64),
    /// `[token, fence]` with this token and fence (a placeholder if the grant is pending).
    Renew(Vec<u8>, i64),
    Nil,
    Int(i64),
    /// An error reply with this code (`ERR`, `WRONGTYPE`).
    Error(&'static str),
    Ok,
    /// No reply now: the client waits in the queue.
    Blocked,
}

/// Where a pending grant's reply comes from.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// The reply of the step's command with this index.
    Reply(usize),
    /// The blocked client in this slot.
    Waiter(usize),
}

/// A grant the model expects, whose token and fence the server names.
#[derive(Debug)]
struct Pending {
    key: usize,
    placeholder: i64,
    source: Source,
    token: Option<Vec<u8>>,
}

/// How long a client waits when its acquire finds the key busy.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wait {
    No,
    /// `WAIT 5`: nil after 5 ms.
    Short,
    /// `WAIT 0`: in the queue until granted or gone.
    Block,
}

/// How a command is run: directly, queued in `MULTI`, or from a script.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Via {
    Direct,
    Transaction,
    Script,
}

struct Slot {
    conn: Conn,
    /// The key this client waits for.
    blocked: Option<usize>,
}

struct Fuzz {
    rng: Rng,
    port: u16,
    server: ServerKind,
    admin: Conn,
    slots: Vec<Slot>,
    model: Model,
    /// Keys given a short expiry by `PEXPIRE`.
    expiring: Vec<usize>,
    /// Keys deleted inside the running transaction: their waiters are served when it
    /// ends (the server's post-notification jobs run then, or right after on Redis 7.0)
    /// or before a lock command on the key in it, whichever comes first.
    deferred: Vec<usize>,
    /// Tokens that have held a lock (the fuzzer tries them again anywhere).
    known: Vec<Vec<u8>>,
    fresh: u64,
    pending: Vec<Pending>,
    placeholders: i64,
    /// The step's effects may reach the server's state after its replies.
    asynchronous: bool,
    log: VecDeque<String>,
    /// What the run exercised, printed at its end.
    seen: HashMap<&'static str, u64>,
}

impl Fuzz {
    fn new(seed: u64, port: u16) -> Self {
        Fuzz {
            rng: Rng(seed),
            port,
            server: server_kind(),
            admin: Conn::open(port),
            slots: (0..SLOTS)
                .map(|_| Slot {
                    conn: Conn::open(port),
                    blocked: None,
                })
                .collect(),
            model: Model::new(KEYS),
            expiring: Vec::new(),
            deferred: Vec::new(),
            known: Vec::new(),
            fresh: 0,
            pending: Vec::new(),
            placeholders: 0,
            asynchronous: false,
            log: VecDeque::new(),
            seen: HashMap::new(),
        }
    }

    fn note(&mut self, what: String) {
        if self.log.len() == 40 {
            self.log.pop_front();
        }
        self.log.push_back(what);
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.below(100) < percent
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.rng.below(items.len() as u64) as usize].clone())
    }

    fn idle_slot(&mut self) -> Option<usize> {
        let idle: Vec<usize> = (0..SLOTS)
            .filter(|&s| self.slots[s].blocked.is_none())
            .collect();
        self.pick(&idle)
    }

    fn fresh_token(&mut self) -> Vec<u8> {
        self.fresh += 1;
        format!("tok-{}", self.fresh).into_bytes()
    }

    /// The tokens of `k`'s holders whose grant the server has named.
    fn holder_tokens(&self, k: usize) -> Vec<Vec<u8>> {
        self.model.keys[k]
            .holders()
            .iter()
            .filter(|h| h.fence > 0)
            .map(|h| h.token.clone())
            .collect()
    }

    /// A token to release or extend with: a holder's of `k` (most often), one that held
    /// somewhere, or one that never held.
    fn some_token(&mut self, k: usize) -> Vec<u8> {
        let holders = self.holder_tokens(k);
        let known = self.known.clone();
        match self.rng.below(10) {
            0..=5 => self.pick(&holders),
            6..=8 => self.pick(&known),
            _ => None,
        }
        .unwrap_or_else(|| self.fresh_token())
    }

    /// Records a grant the server must make now to `token` (`None`: a token it makes);
    /// its fence is learnt from `source`'s reply.
    fn expect_grant(
        &mut self,
        k: usize,
        source: Source,
        token: Option<Vec<u8>>,
        holder: Holder,
    ) -> i64 {
        self.placeholders += 1;
        let placeholder = -self.placeholders;
        let mut holder = holder;
        holder.fence = placeholder;
        if token.is_none() {
            holder.token = format!("\0pending{placeholder}").into_bytes();
        }
        self.model.keys[k].grant(holder);
        self.model.grants += 1;
        self.pending.push(Pending {
            key: k,
            placeholder,
            source,
            token,
        });
        placeholder
    }

    /// Grants `k`'s waiters whose turn has come, as the model says.
    fn admit(&mut self, k: usize) {
        while let Some(w) = self.model.keys[k].admit_next() {
            self.slots[w.slot].blocked = None;
            let holder = Holder {
                token: w.token.clone().unwrap_or_default(),
                fence: 0,
                kind: w.kind,
                session: w.grace_ms.map(|grace_ms| Binding {
                    client: w.client,
                    grace_ms,
                    followed: true,
                }),
                expires_soon: w.expires_soon,
            };
            self.note(format!("  -> waiter in slot {} granted fz:{k}", w.slot));
            *self.seen.entry("grants to waiters").or_default() += 1;
            self.expect_grant(k, Source::Waiter(w.slot), w.token, holder);
        }
    }

    fn admit_all(&mut self) {
        for k in 0..KEYS {
            self.admit(k);
        }
    }

    /// Reads every pending grant's reply, checks its token and that its fence is above
    /// every fence before on the key, in the order the grants were made, and puts the
    /// fences in the model. Returns the fence each placeholder stands for.
    fn resolve(&mut self, replies: &[Value]) -> Result<HashMap<i64, i64>, String> {
        let mut fences = HashMap::new();
        for p in std::mem::take(&mut self.pending) {
            let reply = match p.source {
                Source::Reply(i) => replies.get(i).cloned().ok_or("a reply is missing")?,
                Source::Waiter(slot) => self.slots[slot].conn.read(REPLY_LIMIT).map_err(|e| {
                    format!(
                        "the waiter in slot {slot} was not granted fz:{}: {e}",
                        p.key
                    )
                })?,
            };
            let (token, fence) = grant_of(&reply)
                .ok_or_else(|| format!("a grant on fz:{} answered {reply:?}", p.key))?;
            match &p.token {
                Some(expected) if *expected != token => {
                    return Err(format!("granted with token {token:?}, not {expected:?}"));
                }
                None if token.len() != 32
                    || !token
                        .iter()
                        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)) =>
                {
                    return Err(format!(
                        "a server-made token is not 32 hex digits: {token:?}"
                    ));
                }
                _ => {}
            }
            let key = &mut self.model.keys[p.key];
            if fence <= key.last_fence || fence >= 1 << 53 {
                return Err(format!(
                    "fz:{} granted fence {fence} after fence {}",
                    p.key, key.last_fence
                ));
            }
            key.last_fence = fence;
            if let Some(Held::Lock(holders)) = &mut key.value
                && let Some(h) = holders.iter_mut().find(|h| h.fence == p.placeholder)
            {
                h.fence = fence;
                h.token = token.clone();
            }
            fences.insert(p.placeholder, fence);
            self.known.push(token);
        }
        Ok(fences)
    }

    /// Checks each reply against what the model expected.
    fn check(
        &mut self,
        expects: &[Expect],
        replies: &[Value],
        fences: &HashMap<i64, i64>,
        via: Via,
    ) -> Result<(), String> {
        for (i, expect) in expects.iter().enumerate() {
            let seen = match expect {
                Expect::Grant(_) => "grants",
                Expect::Renew(..) => "renews",
                Expect::Nil => "nil replies",
                Expect::Int(1) => "1 replies",
                Expect::Int(_) => "0 replies",
                Expect::Error(_) => "errors",
                Expect::Ok => "OK replies",
                Expect::Blocked => "waits",
            };
            *self.seen.entry(seen).or_default() += 1;
            if matches!(expect, Expect::Blocked) {
                continue;
            }
            let got = replies.get(i).ok_or("a reply is missing")?;
            let ok = match expect {
                Expect::Grant(placeholder) => {
                    grant_of(got).map(|(_, fence)| fence) == fences.get(placeholder).copied()
                }
                Expect::Renew(token, fence) => {
                    let fence = if *fence < 0 {
                        fences.get(fence).copied().unwrap_or(0)
                    } else {
                        *fence
                    };
                    grant_of(got) == Some((token.clone(), fence))
                }
                Expect::Nil => *got == Value::Nil,
                Expect::Int(n) => *got == Value::Int(*n),
                Expect::Ok => *got == Value::Okay,
                Expect::Error(code) => error_text(got).is_some_and(|text| match via {
                    Via::Script => text.contains(code),
                    _ => text.starts_with(code),
                }),
                Expect::Blocked => true,
            };
            if !ok {
                return Err(format!("reply {i}: expected {expect:?}, got {got:?}"));
            }
        }
        Ok(())
    }

    /// Builds `LOCK.ACQUIRE` on `k` for the client `slot` and applies it to the model.
    fn acquire(&mut self, slot: usize, k: usize, via: Via, index: usize) -> (Vec<Vec<u8>>, Expect) {
        self.serve_deferred(k);
        let kind = match self.rng.below(20) {
            0..=11 => Kind::Exclusive,
            12..=16 => Kind::Shared(None),
            _ => Kind::Shared(Some(1 + self.rng.below(2) as u32)),
        };
        // Some acquires retry a holder's token: the idempotent re-acquire, a reclaim.
        let retry = self.chance(15);
        let wait = match self.rng.below(20) {
            _ if retry => Wait::No,
            0..=6 => Wait::No,
            7..=17 => Wait::Block,
            _ => Wait::Short,
        };
        // A token waits in one queue at most, once, before it ever holds: a waiter's is
        // new or the server's.
        let token = if wait != Wait::No {
            self.chance(70).then(|| self.fresh_token())
        } else {
            match self.rng.below(20) {
                _ if retry => {
                    let holders = self.holder_tokens(k);
                    self.pick(&holders)
                }
                6..=8 => {
                    let known = self.known.clone();
                    self.pick(&known)
                }
                9..=13 => Some(self.fresh_token()),
                _ => None,
            }
        };
        let grace = match self.rng.below(10) {
            0..=6 => None,
            7 | 8 => Some(0),
            _ => Some(LONG_MS),
        };
        let soon = self.chance(5);
        let ttl = if soon { SHORT_MS } else { LONG_MS };

        let mut options: Vec<Vec<Vec<u8>>> = Vec::new();
        if let Some(t) = &token {
            options.push(vec![b"TOKEN".to_vec(), t.clone()]);
        }
        match wait {
            Wait::No => {}
            Wait::Short => options.push(words(&["WAIT", "5"])),
            Wait::Block => options.push(words(&["wait", "0"])),
        }
        if let Some(g) = grace {
            options.push(words(&["SESSION", &g.to_string()]));
        }
        match kind {
            Kind::Exclusive => {}
            Kind::Shared(None) => options.push(words(&["shared"])),
            Kind::Shared(Some(n)) => {
                if self.chance(50) {
                    options.push(words(&["SHARED"]));
                }
                options.push(words(&["LIMIT", &n.to_string()]));
            }
        }
        // Options come in any order.
        for i in (1..options.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            options.swap(i, j);
        }
        let mut argv = vec![
            b"LOCK.ACQUIRE".to_vec(),
            key_name(k),
            ttl.to_string().into_bytes(),
        ];
        argv.extend(options.into_iter().flatten());

        let client = self.slots[slot].conn.id;
        let binding = grace.map(|grace_ms| Binding {
            client,
            grace_ms,
            followed: true,
        });
        let outcome = if via == Via::Script && grace.is_some() {
            Outcome::Error("ERR")
        } else {
            self.model.keys[k].acquire(token.as_deref(), kind)
        };
        let expect = match outcome {
            Outcome::Grant => {
                let holder = Holder {
                    token: token.clone().unwrap_or_default(),
                    fence: 0,
                    kind,
                    session: binding,
                    expires_soon: soon,
                };
                Expect::Grant(self.expect_grant(k, Source::Reply(index), token, holder))
            }
            Outcome::Renew { fence } => {
                let token = token.unwrap_or_default();
                self.model.keys[k].renew(&token, binding, soon);
                Expect::Renew(token, fence)
            }
            Outcome::Error(code) => Expect::Error(code),
            Outcome::Busy => match wait {
                Wait::Block if via == Via::Direct => {
                    self.model.keys[k].queue.push_back(Waiting {
                        slot,
                        client,
                        token,
                        kind,
                        grace_ms: grace,
                        expires_soon: soon,
                    });
                    self.slots[slot].blocked = Some(k);
                    self.asynchronous = true;
                    Expect::Blocked
                }
                _ => Expect::Nil,
            },
        };
        (argv, expect)
    }

    /// Builds `LOCK.RELEASE` on `k` and applies it.
    fn release(&mut self, k: usize) -> (Vec<Vec<u8>>, Expect) {
        self.serve_deferred(k);
        let token = self.some_token(k);
        let argv = vec![b"LOCK.RELEASE".to_vec(), key_name(k), token.clone()];
        if self.model.keys[k].value == Some(Held::Str) {
            return (argv, Expect::Error("WRONGTYPE"));
        }
        let released = self.model.keys[k].release(&token);
        self.admit(k);
        (argv, Expect::Int(i64::from(released)))
    }

    /// Builds `LOCK.EXTEND` on `k` and applies it.
    fn extend(&mut self, k: usize) -> (Vec<Vec<u8>>, Expect) {
        self.serve_deferred(k);
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

    /// Grants the waiters of `k` if a `DEL` in the running transaction put them off.
    fn serve_deferred(&mut self, k: usize) {
        if let Some(i) = self.deferred.iter().position(|&d| d == k) {
            self.deferred.remove(i);
            self.admit(k);
        }
    }

    /// Builds `DEL` or `UNLINK` of `k` and applies it (`via` a transaction: its waiters
    /// are served later, see `deferred`).
    fn delete(&mut self, k: usize, via: Via) -> (Vec<Vec<u8>>, Expect) {
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
    fn run(
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
    fn op_lock_command(&mut self) -> Result<(), String> {
        let k = self.rng.below(KEYS as u64) as usize;
        let slot = self.idle_slot();
        let (argv, expect) = match (self.rng.below(10), slot) {
            (0..=5, Some(s)) => self.acquire(s, k, Via::Direct, 0),
            (0..=7, _) => self.release(k),
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
    fn op_transaction(&mut self) -> Result<(), String> {
        let Some(s) = self.idle_slot() else {
            return self.op_lock_command();
        };
        let count = 2 + self.rng.below(3) as usize;
        let (mut commands, mut expects) = (Vec::new(), Vec::new());
        for i in 0..count {
            let k = self.rng.below(KEYS as u64) as usize;
            let (argv, expect) = match self.rng.below(10) {
                0..=4 => self.acquire(s, k, Via::Transaction, i),
                5 | 6 => self.release(k),
                7 => self.extend(k),
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
    fn op_script(&mut self) -> Result<(), String> {
        let Some(s) = self.idle_slot() else {
            return self.op_lock_command();
        };
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
    fn op_keyspace(&mut self) -> Result<(), String> {
        let k = self.rng.below(KEYS as u64) as usize;
        let name = key_name(k);
        let exists = self.model.keys[k].value.is_some();
        let (argv, expect) = match self.rng.below(20) {
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
            _ => {
                for key in &mut self.model.keys {
                    key.value = None;
                }
                self.admit_all();
                (words(&["FLUSHDB"]), Expect::Ok)
            }
        };
        self.run(None, &[argv], &[expect], Via::Direct)
    }

    /// A client goes: `CLIENT KILL ID`, `CLIENT KILL ADDR`, `QUIT`, a closed socket, or
    /// every client at once (`CLIENT KILL TYPE normal`). Each slot reconnects.
    fn op_disconnect(&mut self) -> Result<(), String> {
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

    /// Lets the short TTLs and expiries of the step run out, and grants the waiters
    /// whose turn that brings (whose own TTL may be short again).
    fn settle(&mut self) -> Result<(), String> {
        loop {
            let soon = self
                .model
                .keys
                .iter()
                .any(|k| k.holders().iter().any(|h| h.expires_soon));
            if !soon && self.expiring.is_empty() {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(SHORT_MS as u64 + 30));
            self.note("  (short TTLs run out)".into());
            for k in std::mem::take(&mut self.expiring) {
                self.model.keys[k].value = None;
            }
            for key in &mut self.model.keys {
                key.drop_holders(|h| h.expires_soon);
            }
            self.admit_all();
            self.asynchronous = true;
            self.resolve(&[])?;
        }
    }

    /// The server's state against the model: every key's `LOCK.INFO`, and no reply
    /// waiting on any client.
    fn check_state(&mut self) -> Result<(), String> {
        for (s, slot) in self.slots.iter().enumerate() {
            if slot.conn.has_input() {
                return Err(format!(
                    "a reply nobody expected arrived for slot {s} (waiting for {:?})",
                    slot.blocked.map(|k| format!("fz:{k}"))
                ));
            }
        }
        let alive: Vec<i64> = self.slots.iter().map(|s| s.conn.id).collect();
        for k in 0..KEYS {
            let name = key_name(k);
            let got = self.admin.query(&[b"LOCK.INFO".to_vec(), name])?;
            let key = &self.model.keys[k];
            match &key.value {
                None if got == Value::Nil => {}
                Some(Held::Str) if error_text(&got).is_some_and(|t| t.starts_with("WRONGTYPE")) => {
                }
                Some(Held::Lock(holders)) => {
                    let fields = info_fields(&got).ok_or_else(|| {
                        format!("LOCK.INFO fz:{k} answered {got:?}, expected a lock")
                    })?;
                    let field = |name: &str| fields.get(name).cloned().unwrap_or_default();
                    let exclusive = holders[0].kind == Kind::Exclusive;
                    let (session, connected) = match holders[0].session {
                        Some(b) if exclusive => (b.grace_ms, i64::from(alive.contains(&b.client))),
                        _ => (-1, -1),
                    };
                    let limit = match holders[0].kind {
                        Kind::Shared(Some(n)) => i64::from(n),
                        _ => -1,
                    };
                    let newest = holders.iter().map(|h| h.fence).max().unwrap_or(0);
                    let want = [
                        ("waiters", key.queue.len() as i64),
                        ("holders", holders.len() as i64),
                        ("limit", limit),
                        ("fence", newest),
                        ("session", session),
                        ("connected", connected),
                    ];
                    for (name, value) in want {
                        if field(name) != Field::Int(value) {
                            return Err(format!(
                                "LOCK.INFO fz:{k} {name} is {:?}, the model says {value} ({fields:?})",
                                field(name)
                            ));
                        }
                    }
                    let mode = if exclusive { "exclusive" } else { "shared" };
                    if field("mode") != Field::Word(mode.into()) {
                        return Err(format!(
                            "LOCK.INFO fz:{k} mode is {:?}, not {mode}",
                            field("mode")
                        ));
                    }
                    if !matches!(field("ttl"), Field::Int(ttl) if ttl > 0) {
                        return Err(format!("LOCK.INFO fz:{k} ttl is {:?}", field("ttl")));
                    }
                }
                expected => {
                    return Err(format!(
                        "LOCK.INFO fz:{k} answered {got:?}; the model holds {expected:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// `INFO lock`'s grants and waiters against the model's.
    fn check_counters(&mut self) -> Result<(), String> {
        let info = match self.admin.query(&words(&["INFO", "lock"]))? {
            Value::BulkString(text) => String::from_utf8_lossy(&text).into_owned(),
            Value::VerbatimString { text, .. } => text,
            other => return Err(format!("INFO lock answered {other:?}")),
        };
        let stat = |name: &str| {
            info.lines().find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(':')?
                    .trim()
                    .parse::<i64>()
                    .ok()
            })
        };
        let waiting = self
            .model
            .keys
            .iter()
            .map(|k| k.queue.len() as i64)
            .sum::<i64>();
        for (name, want) in [
            ("lock_grants", self.model.grants),
            ("lock_waiters", waiting),
        ] {
            if stat(name) != Some(want) {
                return Err(format!(
                    "INFO lock {name} is {:?}, the model says {want}",
                    stat(name)
                ));
            }
        }
        Ok(())
    }

    /// One random step, then the server's state checked against the model (polled to a
    /// deadline when the step's effects may come after its replies).
    fn step(&mut self) -> Result<(), String> {
        self.asynchronous = false;
        match self.rng.below(100) {
            0..=54 => self.op_lock_command()?,
            55..=64 => self.op_transaction()?,
            65..=71 => self.op_script()?,
            72..=91 => self.op_keyspace()?,
            _ => self.op_disconnect()?,
        }
        self.settle()?;
        let deadline = Instant::now() + REPLY_LIMIT;
        loop {
            match self.check_state() {
                Ok(()) => return Ok(()),
                Err(err) if !self.asynchronous || Instant::now() > deadline => return Err(err),
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

/// A `LOCK.INFO` field's value.
#[derive(Debug, Clone, Default, PartialEq)]
enum Field {
    #[default]
    Missing,
    Int(i64),
    Word(String),
}

/// The fields of a `LOCK.INFO` reply (RESP2: a flat field/value array).
fn info_fields(value: &Value) -> Option<HashMap<String, Field>> {
    let Value::Array(items) = value else {
        return None;
    };
    let mut fields = HashMap::new();
    for pair in items.chunks(2) {
        let [Value::BulkString(name), value] = pair else {
            return None;
        };
        let value = match value {
            Value::Int(n) => Field::Int(*n),
            Value::BulkString(word) => Field::Word(String::from_utf8_lossy(word).into_owned()),
            Value::SimpleString(word) => Field::Word(word.clone()),
            _ => return None,
        };
        fields.insert(String::from_utf8_lossy(name).into_owned(), value);
    }
    Some(fields)
}

fn show(argv: &[Vec<u8>]) -> String {
    argv.iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn expect_reply(got: Value, want: Value, what: &str) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what} answered {got:?}, not {want:?}"))
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs `steps` steps from `seed` on a fresh server with a replica; the error names the
/// step, the seed and the last commands.
fn fuzz(seed: u64, steps: u64) -> Result<(), String> {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let mut fuzz = Fuzz::new(seed, master.port);
    let mut replica_admin = Conn::open(replica.port);
    let mut outcome = Ok(());
    for step in 1..=steps {
        let checked = fuzz.step().and_then(|()| {
            if step % 200 == 0 || step == steps {
                fuzz.check_counters()?;
                same_digest(&mut fuzz.admin, &mut replica_admin)?;
            }
            Ok(())
        });
        if let Err(err) = checked {
            outcome = Err(format!("step {step}: {err}"));
            break;
        }
    }
    let mut seen: Vec<_> = fuzz.seen.iter().collect();
    seen.sort();
    println!("model fuzz: seed {seed} saw {seen:?}");
    outcome.map_err(|err| {
        let log: Vec<String> = fuzz.log.iter().cloned().collect();
        format!(
            "{err}\nthe model fuzz failed on {} with seed {seed}: replay with \
             MODEL_FUZZ_SEED={seed} MODEL_FUZZ_STEPS={steps} cargo test --release --test model_fuzz\n\
             last commands:\n  {}\nthe model: {:?}",
            fuzz.server,
            log.join("\n  "),
            fuzz.model.keys
        )
    })
}

/// The replica, once it has everything the master sent, holds what the master holds.
fn same_digest(master: &mut Conn, replica: &mut Conn) -> Result<(), String> {
    let acked = master.query(&words(&["WAIT", "1", "5000"]))?;
    expect_reply(acked, Value::Int(1), "WAIT 1")?;
    let deadline = Instant::now() + REPLY_LIMIT;
    loop {
        let ours = master.query(&words(&["DEBUG", "DIGEST"]))?;
        let theirs = replica.query(&words(&["DEBUG", "DIGEST"]))?;
        if ours == theirs {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the replica's digest {theirs:?} is not the master's {ours:?}"
            ));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn random_command_sequences_keep_to_the_contract() {
    let steps = env_u64("MODEL_FUZZ_STEPS").unwrap_or(1500);
    let seeds: Vec<u64> = match env_u64("MODEL_FUZZ_SEED") {
        Some(seed) => vec![seed],
        None => {
            let base = common::now_ms() as u64;
            (0..2).map(|i| (base ^ (i * 0x9e37_79b9)) | 1).collect()
        }
    };
    for seed in seeds {
        println!(
            "model fuzz: seed {seed}, {steps} steps on {}",
            server_kind()
        );
        if let Err(err) = fuzz(seed, steps) {
            panic!("{err}");
        }
    }
}
