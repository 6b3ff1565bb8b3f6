//! When a collection that grew for a crowd gives its room back. Pure Rust.
//!
//! A `HashMap` keeps its largest size after its entries leave. The waiters' maps, the
//! handoff's timers and a key's shared holders each grow with a crowd and must not hold
//! its memory for good: one rule for all of them.

/// Whether a collection of `len` entries in room for `capacity` should shrink: once
/// under a quarter full, above 64 slots (so that a few entries coming and going do not
/// reallocate each time), and whenever it is empty.
pub fn should_shrink(len: usize, capacity: usize) -> bool {
    (len == 0 || capacity > 64) && len * 4 < capacity
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_when_mostly_or_wholly_empty_only() {
        assert!(should_shrink(0, 1));
        assert!(!should_shrink(0, 0), "nothing to give back");
        assert!(should_shrink(10, 128));
        assert!(!should_shrink(40, 128), "a quarter full or more");
        assert!(!should_shrink(1, 56), "small maps keep their few slots");
    }
}
