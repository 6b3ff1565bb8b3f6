//! The locker's connection: one multiplexed connection, opened lazily, shared by its
//! locks, and reopened after it breaks, with a generation number a session-bound lock
//! follows.

use super::*;

/// A lazily opened, shared multiplexed connection that is reopened after it breaks.
pub(super) struct Conn {
    pub(super) source: AsyncSource,
    pub(super) connect_timeout: Duration,
    pub(super) slot: Mutex<Option<AsyncLink>>,
    /// How many connections the slot has held: session-bound locks know which one they
    /// are bound to.
    pub(super) generation: AtomicU64,
}

impl Conn {
    pub(super) fn new(client: redis::Client, connect_timeout: Duration) -> Self {
        Self::on(AsyncSource::Server(client), connect_timeout)
    }

    pub(super) fn on(source: AsyncSource, connect_timeout: Duration) -> Self {
        Conn {
            source,
            connect_timeout,
            slot: Mutex::new(None),
            generation: AtomicU64::new(0),
        }
    }

    /// A new connection without a response timeout: callers bound each command.
    pub(super) async fn open(&self) -> RedisResult<AsyncLink> {
        self.source.open(self.connect_timeout).await
    }

    pub(super) async fn get(&self) -> RedisResult<AsyncLink> {
        if let Some(con) = self.slot.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(con);
        }
        let con = self.open().await?;
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(con.clone());
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(con)
    }

    pub(super) async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        limit: Duration,
    ) -> RedisResult<T> {
        let result = within(Some(limit), async {
            let mut con = self.get().await?;
            cmd.query_async(&mut con).await
        })
        .await;
        if let Err(err) = &result
            && (err.is_connection_dropped() || err.is_unrecoverable_error())
        {
            *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        result
    }
}
