//! `LOCK.ACQUIREALL` in the fuzzer: one to three keys in any order, decided key by key
//! by the rules of `LOCK.ACQUIRE` (docs/commands.md, "LOCK.ACQUIREALL"): granted (or
//! renewed) all at once only if every key is free for the caller and no waiter is queued
//! on any; else nil, or with `WAIT` one waiter queued on every key, holding none.

use super::acquire::{Choice, Look};
use super::model::{Binding, Holder, Kind, Outcome, Waiting};
use super::{Expect, Fuzz, KEYS, LONG_MS, SHORT_MS, Shape, Source, Via, Wait, key_name};

/// A script that runs `LOCK.ACQUIREALL` on its `KEYS`, with its `ARGV` as the ttl and
/// options.
const SCRIPT: &str = "local a = {#KEYS} \
    for _, k in ipairs(KEYS) do a[#a + 1] = k end \
    for _, v in ipairs(ARGV) do a[#a + 1] = v end \
    return redis.call('LOCK.ACQUIREALL', unpack(a))";

impl Fuzz {
    /// One to three different keys, in random order.
    fn some_keys(&mut self) -> Vec<usize> {
        let mut keys: Vec<usize> = (0..KEYS).collect();
        for i in (1..KEYS).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            keys.swap(i, j);
        }
        keys.truncate(1 + self.rng.below(KEYS as u64) as usize);
        keys
    }

    /// Builds `LOCK.ACQUIREALL` for the client `slot` (run `via` a script: as `EVAL`)
    /// and applies it to the model.
    pub(crate) fn acquire_all(
        &mut self,
        slot: usize,
        via: Via,
        index: usize,
    ) -> (Vec<Vec<u8>>, Expect) {
        let keys = self.some_keys();
        let kind = if self.chance(70) {
            Kind::Exclusive
        } else {
            Kind::Shared(None)
        };
        let Choice {
            wait,
            token,
            grace,
            soon,
        } = self.choose(&keys);
        let ttl = if soon { SHORT_MS } else { LONG_MS };
        let mut rest = vec![ttl.to_string().into_bytes()];
        rest.extend(self.options(token.as_deref(), wait, grace, kind));
        let names: Vec<Vec<u8>> = keys.iter().map(|&k| key_name(k)).collect();
        let argv = if via == Via::Script {
            let mut eval = vec![
                b"EVAL".to_vec(),
                SCRIPT.as_bytes().to_vec(),
                keys.len().to_string().into_bytes(),
            ];
            eval.extend(names);
            eval.extend(rest);
            eval
        } else {
            let mut argv = vec![
                b"LOCK.ACQUIREALL".to_vec(),
                keys.len().to_string().into_bytes(),
            ];
            argv.extend(names);
            argv.extend(rest);
            argv
        };
        *self.seen.entry("acquires of several keys").or_default() += 1;
        // A script cannot bind a lock to a connection: refused before any key is looked at.
        if via == Via::Script && grace.is_some() {
            return (argv, Expect::Error("ERR"));
        }

        // Each key is looked at in order (its waiters served first where they are due);
        // the first key that refuses ends the look, and nothing changes.
        let mut outcomes = Vec::with_capacity(keys.len());
        for &k in &keys {
            self.serve(k, Look::Newcomer);
            let outcome = self.model.keys[k].acquire(token.as_deref(), kind);
            if let Outcome::Error(code) = outcome {
                return (argv, Expect::Error(code));
            }
            outcomes.push(outcome);
        }

        let client = self.slots[slot].conn.id;
        let binding = grace.map(|grace_ms| Binding {
            client,
            grace_ms,
            followed: true,
        });
        if outcomes.contains(&Outcome::Busy) {
            if wait == Wait::Block && via == Via::Direct {
                let waiter = Waiting {
                    slot,
                    client,
                    keys: keys.clone(),
                    all: true,
                    token,
                    kind,
                    grace_ms: grace,
                    expires_soon: soon,
                };
                for &k in &keys {
                    self.model.keys[k].queue.push_back(waiter.clone());
                }
                self.slots[slot].blocked = Some(keys[0]);
                self.asynchronous = true;
                return (argv, Expect::Blocked);
            }
            return (argv, Expect::Nil);
        }

        let mut fences = vec![0; keys.len()];
        let mut granted = Vec::new();
        for (position, (&k, outcome)) in keys.iter().zip(&outcomes).enumerate() {
            match outcome {
                Outcome::Renew { fence } => {
                    let own = token.as_deref().unwrap_or_default();
                    self.model.keys[k].renew(own, binding, soon);
                    fences[position] = *fence;
                }
                _ => granted.push((k, position)),
            }
        }
        if !granted.is_empty() {
            let holder = Holder::new(token.as_deref(), kind, binding, soon);
            let shape = Shape::All(keys.len());
            let source = Source::Reply(index);
            let placeholders = self.expect_grants(&granted, shape, source, token.clone(), holder);
            for (&(_, position), placeholder) in granted.iter().zip(placeholders) {
                fences[position] = placeholder;
            }
        }
        (argv, Expect::All { token, fences })
    }
}
