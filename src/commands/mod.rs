//! The commands: the public `LOCK.*` commands, the internal effect commands that
//! replicate and persist them, their arguments, and the `INFO lock` section.

pub mod args;
pub mod info;
pub mod internal;
pub mod public;
