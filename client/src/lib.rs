//! Rust client for the redis-lock module (work in progress in this commit series).
