//! Slots this node is importing by atomic slot migration (Valkey 9's `CLUSTER
//! MIGRATESLOTS`) and does not serve yet.
//!
//! Such a migration sends the slots' keys to the target as commands (the type's AOF
//! form, then the source's replication stream), long before the target owns them: the
//! source still serves the slots and decides everything about their locks until the
//! import completes. So, on the target, a lock that arrives in an importing slot is kept
//! idle, as on a replica: its session's grace and its shared holders' expiry timers
//! wait until the slot is this node's (`completed`), and a cancelled or failed import,
//! whose keys the server deletes, leaves nothing behind.
//!
//! A leaf: the server events add and end imports, the sessions and the handoff ask.

use std::cell::RefCell;

use lock_core::cluster;

/// Inclusive slot ranges, as the server's migration event lists them.
pub type SlotRanges = Vec<(u16, u16)>;

thread_local! {
    /// The imports under way: the job's name and its slot ranges.
    static IMPORTS: RefCell<Vec<(Vec<u8>, SlotRanges)>> = const { RefCell::new(Vec::new()) };
}

/// An import of `ranges` started (the server's migration event names the job).
pub fn started(job: &[u8], ranges: SlotRanges) {
    IMPORTS.with(|imports| {
        let mut imports = imports.borrow_mut();
        imports.retain(|(name, _)| name != job);
        imports.push((job.to_vec(), ranges));
    });
}

/// The import `job` ended (completed or aborted): its slots are no longer importing.
pub fn ended(job: &[u8]) {
    IMPORTS.with(|imports| imports.borrow_mut().retain(|(name, _)| name != job));
}

/// Whether `key` lies in a slot this node imports and does not serve yet. Costs a
/// thread-local read when no import is under way, as almost always.
pub fn is_importing(key: &[u8]) -> bool {
    IMPORTS.with(|imports| {
        let imports = imports.borrow();
        if imports.is_empty() {
            return false;
        }
        let slot = cluster::key_slot(key);
        imports
            .iter()
            .flat_map(|(_, ranges)| ranges)
            .any(|&(start, end)| (start..=end).contains(&slot))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_in(slot: u16) -> Vec<u8> {
        (0u32..)
            .map(|i| format!("k{i}").into_bytes())
            .find(|key| cluster::key_slot(key) == slot)
            .unwrap()
    }

    #[test]
    fn a_key_is_importing_only_while_an_import_of_its_slot_runs() {
        let (inside, edge, outside) = (key_in(100), key_in(200), key_in(201));
        assert!(!is_importing(&inside));
        started(b"job-a", vec![(50, 150), (200, 200)]);
        assert!(is_importing(&inside));
        assert!(is_importing(&edge));
        assert!(!is_importing(&outside));
        started(b"job-b", vec![(201, 201)]);
        ended(b"job-a");
        assert!(!is_importing(&inside));
        assert!(is_importing(&outside));
        ended(b"job-b");
        assert!(!is_importing(&outside));
    }

    #[test]
    fn a_job_started_again_replaces_its_ranges() {
        let key = key_in(7);
        started(b"job", vec![(7, 7)]);
        started(b"job", vec![(8, 9)]);
        assert!(!is_importing(&key));
        ended(b"job");
    }
}
