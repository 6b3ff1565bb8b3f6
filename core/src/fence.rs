//! The fencing clock: a hybrid logical clock that hands out strictly increasing fences.
//!
//! A fence is `wall-clock ms * 2^10 + logical counter`, but never less than one more
//! than the largest fence this server has granted or seen (its high-water mark). The
//! high-water mark makes fences grow when the wall clock stalls or steps back; the wall
//! clock makes them grow across servers that share no state (slot moves, restarts from
//! an AOF that no longer records old fences). Fences stay below 2^53 so that clients
//! whose numbers are doubles read them exactly: at 2^10 per ms that lasts until 2248.

use std::sync::atomic::{AtomicU64, Ordering};

/// Fences per millisecond of wall clock before the clock runs ahead of real time.
pub const LOGICAL_BITS: u32 = 10;
/// The largest fence ever handed out: 2^53 - 1.
pub const MAX_FENCE: u64 = (1 << 53) - 1;

/// The clock's state: the largest fence granted or observed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FenceClock {
    high_water: u64,
}

impl FenceClock {
    /// A clock that has seen nothing yet.
    #[cfg(test)]
    pub const fn new() -> Self {
        Self { high_water: 0 }
    }

    /// The next fence at wall-clock time `now_ms`: greater than every fence granted or
    /// observed so far. `None` when 2^53 is reached (the clock then stays where it is).
    pub fn next(&mut self, now_ms: i64) -> Option<u64> {
        let wall = u64::try_from(now_ms)
            .unwrap_or(0)
            .checked_shl(LOGICAL_BITS)?;
        let fence = wall.max(self.high_water.checked_add(1)?);
        if fence > MAX_FENCE {
            return None;
        }
        self.high_water = fence;
        Some(fence)
    }

    /// Raises the high-water mark to `fence` if that is larger: a fence loaded from an
    /// RDB file, received from the master, or restored from another server.
    #[cfg(test)]
    pub fn observe(&mut self, fence: u64) {
        self.high_water = self.high_water.max(fence);
    }

    /// The largest fence granted or observed.
    pub const fn high_water(&self) -> u64 {
        self.high_water
    }
}

/// This server's high-water mark. Fences are handed out by commands, timers and
/// callbacks on the server's main thread, one at a time (a forked child that saves reads
/// its own copy), so a plain load and store is exact: no lock, whose two locked
/// instructions every acquire used to pay. An atomic all the same, so that nothing here
/// needs `unsafe`.
static HIGH_WATER: AtomicU64 = AtomicU64::new(0);

/// This server's fencing clock.
#[derive(Debug, Clone, Copy)]
pub struct ServerClock;

/// The server's fencing clock.
pub fn clock() -> ServerClock {
    ServerClock
}

impl ServerClock {
    fn read(self) -> FenceClock {
        FenceClock {
            high_water: HIGH_WATER.load(Ordering::Relaxed),
        }
    }

    /// The next fence at wall-clock time `now_ms` (see [`FenceClock::next`]).
    pub fn next(self, now_ms: i64) -> Option<u64> {
        let mut clock = self.read();
        let fence = clock.next(now_ms)?;
        HIGH_WATER.store(clock.high_water, Ordering::Relaxed);
        Some(fence)
    }

    /// Raises the high-water mark to `fence` (see [`FenceClock::observe`]).
    pub fn observe(self, fence: u64) {
        HIGH_WATER.fetch_max(fence, Ordering::Relaxed);
    }

    /// The largest fence granted or observed.
    pub fn high_water(self) -> u64 {
        self.read().high_water()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_763_000_000_000; // November 2025, in ms

    #[test]
    fn follows_the_wall_clock() {
        let mut clock = FenceClock::new();
        let first = clock.next(NOW).unwrap();
        assert_eq!(first, (NOW as u64) << LOGICAL_BITS);
        let later = clock.next(NOW + 5).unwrap();
        assert_eq!(later, ((NOW + 5) as u64) << LOGICAL_BITS);
    }

    #[test]
    fn grows_within_one_millisecond() {
        let mut clock = FenceClock::new();
        let fences: Vec<u64> = (0..5000).map(|_| clock.next(NOW).unwrap()).collect();
        assert!(fences.windows(2).all(|w| w[1] == w[0] + 1));
    }

    #[test]
    fn grows_when_the_wall_clock_steps_backwards() {
        let mut clock = FenceClock::new();
        let before = clock.next(NOW).unwrap();
        let after_step = clock.next(NOW - 3_600_000).unwrap();
        assert_eq!(after_step, before + 1);
        let zero_clock = clock.next(0).unwrap();
        assert_eq!(zero_clock, before + 2);
        let negative_clock = clock.next(-5).unwrap();
        assert_eq!(negative_clock, before + 3);
    }

    #[test]
    fn an_observed_fence_from_elsewhere_is_exceeded() {
        let mut clock = FenceClock::new();
        let foreign = ((NOW + 60_000) as u64) << LOGICAL_BITS;
        clock.observe(foreign);
        assert_eq!(clock.next(NOW).unwrap(), foreign + 1);
        clock.observe(5); // a smaller fence never lowers the mark
        assert_eq!(clock.high_water(), foreign + 1);
    }

    #[test]
    fn a_fresh_clock_exceeds_fences_of_an_earlier_wall_clock_time() {
        // A restart that lost the high-water mark (pure AOF, no lock keys left):
        // the wall clock alone still puts new fences above the old ones.
        let mut before_restart = FenceClock::new();
        let old = (0..100)
            .map(|_| before_restart.next(NOW).unwrap())
            .max()
            .unwrap();
        let mut after_restart = FenceClock::new();
        assert!(after_restart.next(NOW + 1).unwrap() > old);
    }

    #[test]
    fn stays_below_two_to_the_53() {
        let mut clock = FenceClock::new();
        clock.observe(MAX_FENCE - 1);
        assert_eq!(clock.next(NOW), Some(MAX_FENCE));
        assert_eq!(clock.next(NOW), None);
        assert_eq!(clock.high_water(), MAX_FENCE);
        // A wall clock past the year 2248 cannot produce a fence either.
        let mut late = FenceClock::new();
        assert_eq!(late.next(1 << 44), None);
        assert_eq!(late.next(i64::MAX), None);
        // Year 2200 still works.
        assert!(FenceClock::new().next(7_258_118_400_000).is_some());
    }
}
