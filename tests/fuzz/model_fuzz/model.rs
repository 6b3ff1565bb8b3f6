//! The contract (docs/commands.md and its pages) as a small state machine, written from the contract and not
//! from the module's code: who holds each key (one exclusive holder, or shared holders
//! under one limit or none), who waits in which order, which fences were granted, and
//! which holders are bound to which connection. The fuzzer asks it what a command must
//! answer, then records what the server answered (tokens and fences the server chose).

use std::collections::VecDeque;

/// How a holder holds a key, or how a waiter asks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exclusive,
    /// `SHARED`, with `LIMIT n` or without.
    Shared(Option<u32>),
}

/// A lock bound to a connection (`SESSION grace-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// The server's `CLIENT ID` of the bound connection.
    pub client: i64,
    pub grace_ms: i64,
    /// Whether the module still releases it when the connection closes: not after a
    /// `RENAME` on a server where the module cannot follow key moves.
    pub followed: bool,
}

/// One holder of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub token: Vec<u8>,
    pub fence: i64,
    pub kind: Kind,
    pub session: Option<Binding>,
    /// Its TTL is a few ms: the fuzzer lets it expire before the next step.
    pub expires_soon: bool,
}

impl Holder {
    /// A holder about to be granted: `token` (`None`: one the server makes), its fence
    /// named by the server's reply.
    pub fn new(
        token: Option<&[u8]>,
        kind: Kind,
        session: Option<Binding>,
        expires_soon: bool,
    ) -> Self {
        Holder {
            token: token.map(<[u8]>::to_vec).unwrap_or_default(),
            fence: 0,
            kind,
            session,
            expires_soon,
        }
    }
}

/// What a key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Lock(Vec<Holder>),
    /// A plain string written over the lock (`SET`): lock commands answer `WRONGTYPE`,
    /// and waiters keep waiting until it is gone.
    Str,
}

/// A client blocked in `LOCK.ACQUIRE ... WAIT` or `LOCK.ACQUIREALL ... WAIT`, queued on
/// each of its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The fuzzer's client slot, whose connection holds the pending reply.
    pub slot: usize,
    pub client: i64,
    /// The keys it waits for, in the order it named them: one, or several for
    /// `LOCK.ACQUIREALL` (whose reply is `[token, [fence, ...]]` even for one key).
    pub keys: Vec<usize>,
    pub all: bool,
    /// Its `TOKEN`, or `None` for one the server makes.
    pub token: Option<Vec<u8>>,
    pub kind: Kind,
    pub grace_ms: Option<i64>,
    pub expires_soon: bool,
}

/// One key: its value, its queue, and the newest fence granted on it.
#[derive(Debug, Clone, Default)]
pub struct Key {
    pub value: Option<Value>,
    pub queue: VecDeque<Waiting>,
    pub last_fence: i64,
}

/// What an acquire must answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `[token, fence]` with a new fence.
    Grant,
    /// `[token, fence]` with the holder's own fence: the idempotent re-acquire.
    Renew { fence: i64 },
    /// Nil, or a place in the queue with `WAIT`.
    Busy,
    /// An error starting with this code; nothing changes.
    Error(&'static str),
}

impl Key {
    /// The holders, if the key holds a lock.
    pub fn holders(&self) -> &[Holder] {
        match &self.value {
            Some(Value::Lock(holders)) => holders,
            _ => &[],
        }
    }

    fn holders_mut(&mut self) -> Option<&mut Vec<Holder>> {
        match &mut self.value {
            Some(Value::Lock(holders)) => Some(holders),
            _ => None,
        }
    }

    /// The kind every holder has (`None`: free or not a lock).
    pub fn held_kind(&self) -> Option<Kind> {
        self.holders().first().map(|h| h.kind)
    }

    /// Whether a newcomer of kind `want` fits beside the holders.
    fn admits(&self, want: Kind) -> bool {
        match (&self.value, self.held_kind(), want) {
            (None, ..) => true,
            (_, Some(Kind::Shared(limit)), Kind::Shared(wanted)) if limit == wanted => {
                limit.is_none_or(|n| self.holders().len() < n as usize)
            }
            _ => false,
        }
    }

    /// What `LOCK.ACQUIRE` of kind `want` with `token` must answer, the key as it is.
    pub fn acquire(&self, token: Option<&[u8]>, want: Kind) -> Outcome {
        if self.value == Some(Value::Str) {
            return Outcome::Error("WRONGTYPE");
        }
        if let (Some(Kind::Shared(theirs)), Kind::Shared(limit)) = (self.held_kind(), want)
            && theirs != limit
        {
            return Outcome::Error("ERR");
        }
        let mine = token.and_then(|t| self.holders().iter().find(|h| h.token == t));
        match mine {
            Some(h)
                if matches!(
                    (h.kind, want),
                    (Kind::Exclusive, Kind::Exclusive) | (Kind::Shared(_), Kind::Shared(_))
                ) =>
            {
                Outcome::Renew { fence: h.fence }
            }
            Some(_) => Outcome::Error("ERR"),
            None if !self.queue.is_empty() || !self.admits(want) => Outcome::Busy,
            None => Outcome::Grant,
        }
    }

    /// Records a grant to `holder` (whose fence the caller checks against `last_fence`
    /// once the server has named it).
    pub fn grant(&mut self, holder: Holder) {
        match self.holders_mut() {
            Some(holders) => holders.push(holder),
            None => self.value = Some(Value::Lock(vec![holder])),
        }
    }

    /// The re-acquire by `token`: bound anew (or unbound), expiring soon or not.
    pub fn renew(&mut self, token: &[u8], session: Option<Binding>, expires_soon: bool) {
        if let Some(h) = self
            .holders_mut()
            .and_then(|hs| hs.iter_mut().find(|h| h.token == token))
        {
            h.session = session;
            h.expires_soon = expires_soon;
        }
    }

    /// Takes `token`'s holder out (release): whether it held.
    pub fn release(&mut self, token: &[u8]) -> bool {
        let Some(holders) = self.holders_mut() else {
            return false;
        };
        let before = holders.len();
        holders.retain(|h| h.token != token);
        let released = holders.len() < before;
        if holders.is_empty() {
            self.value = None;
        }
        released
    }

    /// `LOCK.EXTEND`: whether `token` holds it (its TTL is then `expires_soon` or not).
    pub fn extend(&mut self, token: &[u8], expires_soon: bool) -> bool {
        match self
            .holders_mut()
            .and_then(|hs| hs.iter_mut().find(|h| h.token == token))
        {
            Some(h) => {
                h.expires_soon = expires_soon;
                true
            }
            None => false,
        }
    }

    /// Takes out every holder for which `gone` says so; the key goes with its last one.
    pub fn drop_holders(&mut self, gone: impl Fn(&Holder) -> bool) -> usize {
        let Some(holders) = self.holders_mut() else {
            return 0;
        };
        let before = holders.len();
        holders.retain(|h| !gone(h));
        let dropped = before - holders.len();
        if holders.is_empty() {
            self.value = None;
        }
        dropped
    }

    /// Takes out of the queue the waiters granted now, oldest first: each in turn while
    /// it fits beside what is held by then (one exclusive waiter alone, or shared
    /// waiters up to the next one that does not fit). A waiter for several keys stops
    /// it: that one is granted only with all its keys (`Model::ready_all`). The caller
    /// reads their replies and records each grant (`grant`) in this order.
    pub fn admit_next(&mut self) -> Option<Waiting> {
        let head = self.queue.front()?;
        if head.all || !self.admits(head.kind) {
            return None;
        }
        self.queue.pop_front()
    }
}

impl Waiting {
    /// Whether `other` is this same blocked request (a slot blocks once at a time).
    pub fn is(&self, other: &Waiting) -> bool {
        self.slot == other.slot && self.client == other.client
    }
}

/// The whole keyspace the fuzzer plays on.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub keys: Vec<Key>,
    /// Grants made so far (`lock_grants` in `INFO lock`).
    pub grants: i64,
}

impl Model {
    pub fn new(keys: usize) -> Self {
        Model {
            keys: vec![Key::default(); keys],
            grants: 0,
        }
    }

    /// The waiter for several keys at the head of `k`'s queue, if it heads every queue
    /// it is in and fits beside what each of its keys holds: it is granted them all now.
    /// It is taken out of every queue; the caller records a grant on each key.
    pub fn take_ready_all(&mut self, k: usize) -> Option<Waiting> {
        let head = self.keys[k].queue.front()?.clone();
        let ready = head.all
            && head.keys.iter().all(|&j| {
                let key = &self.keys[j];
                key.queue.front().is_some_and(|w| w.is(&head)) && key.admits(head.kind)
            });
        if !ready {
            return None;
        }
        for &j in &head.keys {
            self.keys[j].queue.pop_front();
        }
        Some(head)
    }

    /// Clients blocked now, each once however many keys it waits for (`lock_waiters`).
    pub fn waiting(&self) -> usize {
        let mut clients: Vec<i64> = self
            .keys
            .iter()
            .flat_map(|k| k.queue.iter().map(|w| w.client))
            .collect();
        clients.sort_unstable();
        clients.dedup();
        clients.len()
    }

    /// Connection `client` closed: it leaves every queue, and the locks bound to it with
    /// a grace of 0 go at once (the fuzzer's other graces outlast the run, so those stay,
    /// shown as not connected). Returns the keys that changed.
    pub fn disconnect(&mut self, client: i64) -> Vec<usize> {
        let mut changed = Vec::new();
        for (i, key) in self.keys.iter_mut().enumerate() {
            key.queue.retain(|w| w.client != client);
            let released = key.drop_holders(|h| {
                h.session
                    .is_some_and(|s| s.client == client && s.grace_ms == 0 && s.followed)
            });
            if released > 0 {
                changed.push(i);
            }
        }
        changed
    }

    /// `RENAME from to`: `to` takes `from`'s value (its own holders go; its waiters stay);
    /// `from` is gone, and its waiters are granted. Bindings follow where the module can
    /// follow key moves.
    pub fn rename(&mut self, from: usize, to: usize, follows_moves: bool) {
        let mut value = self.keys[from].value.take();
        if let Some(Value::Lock(holders)) = &mut value
            && !follows_moves
        {
            for h in holders.iter_mut() {
                if let Some(s) = &mut h.session {
                    s.followed = false;
                }
            }
        }
        // Fences on `to` keep growing from the larger of both keys' fences.
        self.keys[to].last_fence = self.keys[to].last_fence.max(self.keys[from].last_fence);
        self.keys[to].value = value;
    }

    /// `COPY from to` (or `RESTORE` of `from`'s payload at `to`): `to` takes a copy of
    /// `from`'s value (its own holders go; its waiters stay behind the copy, and the
    /// caller admits those that fit beside it).
    pub fn copy(&mut self, from: usize, to: usize) {
        self.keys[to].last_fence = self.keys[to].last_fence.max(self.keys[from].last_fence);
        self.keys[to].value = self.keys[from].value.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(token: &str, fence: i64, kind: Kind) -> Holder {
        Holder {
            token: token.as_bytes().to_vec(),
            fence,
            kind,
            session: None,
            expires_soon: false,
        }
    }

    fn waiter(slot: usize, kind: Kind) -> Waiting {
        Waiting {
            slot,
            client: slot as i64,
            keys: vec![0],
            all: false,
            token: None,
            kind,
            grace_ms: None,
            expires_soon: false,
        }
    }

    #[test]
    fn readers_up_to_the_next_writer_are_admitted_together() {
        let mut key = Key::default();
        key.grant(holder("w", 1, Kind::Exclusive));
        key.queue.push_back(waiter(0, Kind::Shared(None)));
        key.queue.push_back(waiter(1, Kind::Shared(None)));
        key.queue.push_back(waiter(2, Kind::Exclusive));
        key.queue.push_back(waiter(3, Kind::Shared(None)));
        assert_eq!(key.acquire(None, Kind::Shared(None)), Outcome::Busy);
        assert!(key.release(b"w"));
        let mut admitted = Vec::new();
        while let Some(w) = key.admit_next() {
            admitted.push(w.slot);
            key.grant(holder(&format!("r{}", w.slot), 2 + w.slot as i64, w.kind));
        }
        assert_eq!(admitted, [0, 1]);
        assert_eq!(key.queue.len(), 2);
    }

    #[test]
    fn a_waiter_for_several_keys_is_granted_only_at_the_head_of_every_queue() {
        let mut model = Model::new(2);
        let all = Waiting {
            keys: vec![1, 0],
            all: true,
            ..waiter(0, Kind::Exclusive)
        };
        model.keys[0].grant(holder("h", 1, Kind::Exclusive));
        model.keys[0].queue.push_back(waiter(1, Kind::Exclusive));
        model.keys[0].queue.push_back(all.clone());
        model.keys[1].queue.push_back(all.clone());
        assert_eq!(
            model.keys[1].admit_next(),
            None,
            "the key stays free for it"
        );
        assert_eq!(model.take_ready_all(1), None, "an older waiter heads key 0");
        assert_eq!(model.waiting(), 2);
        assert!(model.keys[0].release(b"h"));
        assert_eq!(model.keys[0].admit_next().map(|w| w.slot), Some(1));
        model.keys[0].grant(holder("w1", 2, Kind::Exclusive));
        assert_eq!(model.take_ready_all(1), None, "key 0 is held");
        assert!(model.keys[0].release(b"w1"));
        assert_eq!(model.take_ready_all(0), Some(all));
        assert_eq!(model.waiting(), 0);
    }

    #[test]
    fn a_limit_that_disagrees_is_an_error_and_a_kind_change_too() {
        let mut key = Key::default();
        key.grant(holder("a", 1, Kind::Shared(Some(2))));
        assert_eq!(
            key.acquire(None, Kind::Shared(Some(3))),
            Outcome::Error("ERR")
        );
        assert_eq!(
            key.acquire(Some(b"a"), Kind::Exclusive),
            Outcome::Error("ERR")
        );
        assert_eq!(
            key.acquire(Some(b"a"), Kind::Shared(Some(2))),
            Outcome::Renew { fence: 1 }
        );
        key.grant(holder("b", 2, Kind::Shared(Some(2))));
        assert_eq!(key.acquire(None, Kind::Shared(Some(2))), Outcome::Busy);
    }
}
