//! `LOCK.ACQUIRE` in the fuzzer, and the random choices every acquire makes (how it
//! waits, its token, its binding, its TTL) with the options they make, in any order.

use super::model::{Binding, Holder, Kind, Outcome, Waiting};
use super::{Expect, Fuzz, LONG_MS, SHORT_MS, Source, Via, Wait, key_name, words};

/// Who looks at a key's waiters before a lock command on it (`Fuzz::serve`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Look {
    /// An acquire: a free or shared key.
    Newcomer,
    /// A release or an extend: a free key.
    Holder,
}

/// An acquire's random choices but its keys and kind.
pub(crate) struct Choice {
    pub wait: Wait,
    /// `TOKEN`, or `None` for one the server makes.
    pub token: Option<Vec<u8>>,
    /// `SESSION grace-ms`.
    pub grace: Option<i64>,
    /// A TTL the fuzzer lets run out.
    pub soon: bool,
}

impl Fuzz {
    /// Builds `LOCK.ACQUIRE` on `k` for the client `slot` and applies it to the model.
    pub(crate) fn acquire(
        &mut self,
        slot: usize,
        k: usize,
        via: Via,
        index: usize,
    ) -> (Vec<Vec<u8>>, Expect) {
        self.serve(k, Look::Newcomer);
        let kind = match self.rng.below(20) {
            0..=11 => Kind::Exclusive,
            12..=16 => Kind::Shared(None),
            _ => Kind::Shared(Some(1 + self.rng.below(2) as u32)),
        };
        let Choice {
            wait,
            token,
            grace,
            soon,
        } = self.choose(&[k]);
        let ttl = if soon { SHORT_MS } else { LONG_MS };

        let mut argv = vec![
            b"LOCK.ACQUIRE".to_vec(),
            key_name(k),
            ttl.to_string().into_bytes(),
        ];
        argv.extend(self.options(token.as_deref(), wait, grace, kind));

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
                let holder = Holder::new(token.as_deref(), kind, binding, soon);
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
                        keys: vec![k],
                        all: false,
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

    /// How an acquire of `keys` waits, with which token, bound or not, for long or not.
    pub(crate) fn choose(&mut self, keys: &[usize]) -> Choice {
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
                    let holders: Vec<Vec<u8>> =
                        keys.iter().flat_map(|&k| self.holder_tokens(k)).collect();
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
        Choice {
            wait,
            token,
            grace,
            soon,
        }
    }

    /// An acquire's options, in any order.
    pub(crate) fn options(
        &mut self,
        token: Option<&[u8]>,
        wait: Wait,
        grace: Option<i64>,
        kind: Kind,
    ) -> Vec<Vec<u8>> {
        let mut options: Vec<Vec<Vec<u8>>> = Vec::new();
        if let Some(t) = token {
            options.push(vec![b"TOKEN".to_vec(), t.to_vec()]);
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
        for i in (1..options.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            options.swap(i, j);
        }
        options.into_iter().flatten().collect()
    }
}
