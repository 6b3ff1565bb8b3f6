//! What the runner's main thread waits on, from one channel: the signals it passes on,
//! the grant its acquire (or campaign) thread got, and the end of its command.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread;

use crate::sys;

/// One event; `G` is what a grant gives (a lock, a leadership).
pub enum Event<G> {
    /// One of the signals the runner passes on arrived.
    Signal(i32),
    /// The acquire (or campaign) ended: the guard, `None` when busy, or the error.
    Granted(redis::RedisResult<Option<G>>),
    /// The command ended (not yet reaped).
    Ended,
}

/// The channel, with a thread that sends every signal of [`sys::FORWARDED`] to it (they
/// must be blocked already: [`sys::block_forwarded`], first thing in `main`).
pub fn channel_with_signals<G: Send + 'static>() -> (Sender<Event<G>>, Receiver<Event<G>>) {
    let (tx, rx) = channel();
    let signals = tx.clone();
    thread::spawn(move || {
        loop {
            let signal = sys::next_signal();
            if signals.send(Event::Signal(signal)).is_err() {
                return;
            }
        }
    });
    (tx, rx)
}

/// Runs `acquire` in a thread of its own, its result sent as [`Event::Granted`].
pub fn acquire_in_thread<G: Send + 'static>(
    tx: &Sender<Event<G>>,
    acquire: impl FnOnce() -> redis::RedisResult<Option<G>> + Send + 'static,
) {
    let tx = tx.clone();
    thread::spawn(move || {
        let _ = tx.send(Event::Granted(acquire()));
    });
}
