mod async_guard;
#[path = "../common/mod.rs"]
mod common;
mod deployments;
mod election;
mod election_churn;
mod guard;
mod multi_guards;
mod redlock;
mod replicas;
mod shared_guards;
