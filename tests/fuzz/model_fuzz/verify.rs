//! Checking the server against the model: the grants it expects (each waiter's reply
//! read, its fence above every fence before on the key), every reply of a step, the
//! state of every key after it (`LOCK.INFO`), and `INFO lock`'s counters; short TTLs let
//! run out before the next step.

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use redis::Value;

use super::conn::{REPLY_LIMIT, error_text, grant_all_of, grant_of};
use super::model::{Binding, Holder, Kind, Value as Held, Waiting};
use super::{Expect, Fuzz, KEYS, NewGrant, Pending, SHORT_MS, Shape, Source, Via, key_name, words};

impl Fuzz {
    /// Records a grant the server must make now to `token` (`None`: a token it makes);
    /// its fence is learnt from `source`'s reply.
    pub(crate) fn expect_grant(
        &mut self,
        k: usize,
        source: Source,
        token: Option<Vec<u8>>,
        holder: Holder,
    ) -> i64 {
        let placeholders = self.expect_grants(&[(k, 0)], Shape::One, source, token, holder);
        placeholders[0]
    }

    /// Records the grants of several keys the server must make now in one reply of
    /// `shape`: each `(key, place of its fence in the reply)` to `holder`, its fence
    /// learnt from `source`'s reply. Returns each key's placeholder fence.
    pub(crate) fn expect_grants(
        &mut self,
        keys: &[(usize, usize)],
        shape: Shape,
        source: Source,
        token: Option<Vec<u8>>,
        holder: Holder,
    ) -> Vec<i64> {
        let mut grants = Vec::with_capacity(keys.len());
        for &(key, position) in keys {
            self.placeholders += 1;
            let placeholder = -self.placeholders;
            let mut holder = holder.clone();
            holder.fence = placeholder;
            if token.is_none() {
                holder.token = format!("\0pending{placeholder}").into_bytes();
            }
            self.model.keys[key].grant(holder);
            self.model.grants += 1;
            grants.push(NewGrant {
                key,
                placeholder,
                position,
            });
        }
        let placeholders = grants.iter().map(|g| g.placeholder).collect();
        self.pending.push(Pending {
            grants,
            shape,
            source,
            token,
        });
        placeholders
    }

    /// Grants `k`'s waiters whose turn has come, as the model says: the ones for `k`
    /// alone, and a waiter for several keys at the head of every queue it is in, whose
    /// other keys are then looked at again.
    pub(crate) fn admit(&mut self, k: usize) {
        loop {
            if let Some(w) = self.model.keys[k].admit_next() {
                self.slots[w.slot].blocked = None;
                self.note(format!("  -> waiter in slot {} granted fz:{k}", w.slot));
                *self.seen.entry("grants to waiters").or_default() += 1;
                let holder = waiter_holder(&w);
                self.expect_grant(k, Source::Waiter(w.slot), w.token, holder);
                continue;
            }
            let Some(w) = self.model.take_ready_all(k) else {
                return;
            };
            self.slots[w.slot].blocked = None;
            self.note(format!(
                "  -> waiter in slot {} granted {:?} at once",
                w.slot, w.keys
            ));
            *self
                .seen
                .entry("grants of several keys to waiters")
                .or_default() += 1;
            let keys: Vec<(usize, usize)> = w.keys.iter().copied().zip(0..).collect();
            let holder = waiter_holder(&w);
            let shape = Shape::All(keys.len());
            self.expect_grants(&keys, shape, Source::Waiter(w.slot), w.token, holder);
            for &j in w.keys.iter().filter(|&&j| j != k) {
                self.admit(j);
            }
        }
    }

    pub(crate) fn admit_all(&mut self) {
        for k in 0..KEYS {
            self.admit(k);
        }
    }

    /// Reads every pending grant's reply, checks its token and that its fence is above
    /// every fence before on the key, in the order the grants were made, and puts the
    /// fences in the model. Returns the fence each placeholder stands for.
    pub(crate) fn resolve(&mut self, replies: &[Value]) -> Result<HashMap<i64, i64>, String> {
        let mut fences = HashMap::new();
        for p in std::mem::take(&mut self.pending) {
            let keys: Vec<usize> = p.grants.iter().map(|g| g.key).collect();
            let reply = match p.source {
                Source::Reply(i) => replies.get(i).cloned().ok_or("a reply is missing")?,
                Source::Waiter(slot) => self.slots[slot].conn.read(REPLY_LIMIT).map_err(|e| {
                    format!("the waiter in slot {slot} was not granted fz:{keys:?}: {e}")
                })?,
            };
            let (token, fences_named) = match p.shape {
                Shape::One => grant_of(&reply).map(|(token, fence)| (token, vec![fence])),
                Shape::All(n) => grant_all_of(&reply).filter(|(_, fences)| fences.len() == n),
            }
            .ok_or_else(|| format!("a grant on fz:{keys:?} answered {reply:?}"))?;
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
            for g in &p.grants {
                let fence = fences_named[g.position];
                let key = &mut self.model.keys[g.key];
                if fence <= key.last_fence || fence >= 1 << 53 {
                    return Err(format!(
                        "fz:{} granted fence {fence} after fence {}",
                        g.key, key.last_fence
                    ));
                }
                key.last_fence = fence;
                if let Some(Held::Lock(holders)) = &mut key.value
                    && let Some(h) = holders.iter_mut().find(|h| h.fence == g.placeholder)
                {
                    h.fence = fence;
                    h.token = token.clone();
                }
                fences.insert(g.placeholder, fence);
            }
            self.known.push(token);
        }
        Ok(fences)
    }

    /// Checks each reply against what the model expected.
    pub(crate) fn check(
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
                Expect::All { .. } => "grants of several keys",
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
                Expect::All {
                    token,
                    fences: want,
                } => {
                    let named = |fence: &i64| {
                        if *fence < 0 {
                            fences.get(fence).copied()
                        } else {
                            Some(*fence)
                        }
                    };
                    let want: Option<Vec<i64>> = want.iter().map(named).collect();
                    grant_all_of(got).is_some_and(|(got_token, got_fences)| {
                        Some(got_fences) == want && token.as_ref().is_none_or(|t| *t == got_token)
                    })
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

    /// Lets the short TTLs and expiries of the step run out, and grants the waiters
    /// whose turn that brings (whose own TTL may be short again).
    pub(crate) fn settle(&mut self) -> Result<(), String> {
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
    pub(crate) fn check_state(&mut self) -> Result<(), String> {
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
            let got = self.admin.query(&[b"LOCK.INFO".to_vec(), name.clone()])?;
            // LOCK.WATCH with a fence no state has answers at once with the state.
            let watched = self.admin.query(&[
                b"LOCK.WATCH".to_vec(),
                name,
                i64::MAX.to_string().into_bytes(),
                b"0".to_vec(),
            ])?;
            let key = &self.model.keys[k];
            let state = match &key.value {
                None => Some(0),
                Some(Held::Lock(holders)) => holders.iter().map(|h| h.fence).max(),
                Some(Held::Str) => None,
            };
            let watch_agrees = match state {
                Some(fence) => watched == Value::Array(vec![Value::Int(fence), Value::Nil]),
                None => error_text(&watched).is_some_and(|t| t.starts_with("WRONGTYPE")),
            };
            if !watch_agrees {
                return Err(format!(
                    "LOCK.WATCH fz:{k} answered {watched:?}; the model holds {:?}",
                    key.value
                ));
            }
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
                        ("watchers", 0),
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
                    // The fuzzer publishes no value.
                    if field("value") != Field::Nil {
                        return Err(format!("LOCK.INFO fz:{k} value is {:?}", field("value")));
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
    pub(crate) fn check_counters(&mut self) -> Result<(), String> {
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
        let waiting = self.model.waiting() as i64;
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
}

/// What a waiter holds once granted.
fn waiter_holder(w: &Waiting) -> Holder {
    let session = w.grace_ms.map(|grace_ms| Binding {
        client: w.client,
        grace_ms,
        followed: true,
    });
    Holder::new(w.token.as_deref(), w.kind, session, w.expires_soon)
}

/// A `LOCK.INFO` field's value.
#[derive(Debug, Clone, Default, PartialEq)]
enum Field {
    #[default]
    Missing,
    Int(i64),
    Word(String),
    Nil,
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
            Value::Nil => Field::Nil,
            _ => return None,
        };
        fields.insert(String::from_utf8_lossy(name).into_owned(), value);
    }
    Some(fields)
}
