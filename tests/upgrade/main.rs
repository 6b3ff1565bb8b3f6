//! Upgrades proven release to release (docs/operations.md, "Upgrading"): the previous
//! release's module, built from the commit CHANGELOG.md names
//! (`scripts/previous-release.sh`, once), against the module under test, with locks of
//! every kind: its RDB and its AOF load with every lock intact; a replica of either
//! version follows a master of the other under live traffic and is promoted with every
//! lock; and a module given an RDB of a newer encoding refuses it and exits, never
//! loading half of it or crashing.

#[path = "../common/mod.rs"]
mod common;
mod locks;
mod persistence;
mod previous;
mod refusal;
mod replication;
