//! The server the module runs in: which it is and what it supports (`identity.rs`), and
//! the server events the module follows (`events.rs`), the module's settings
//! (`settings.rs`).

pub mod events;
pub mod identity;
pub mod settings;
