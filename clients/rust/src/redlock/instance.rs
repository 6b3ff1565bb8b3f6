//! One master of the blocking Redlock: its connection, opened lazily and again after it
//! breaks, with the per-master timeout.

use super::*;

pub(super) struct Instance {
    pub(super) client: redis::Client,
    /// Kept open between calls; `None` after an error, reopened on next use.
    pub(super) con: Mutex<Option<Connection>>,
}

impl Instance {
    /// The kept connection with `timeout` for reads and writes, opened if there is none.
    pub(super) fn open<'a>(
        &self,
        slot: &'a mut Option<Connection>,
        timeout: Duration,
    ) -> RedisResult<&'a mut Connection> {
        match slot {
            Some(con) => {
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))?;
                Ok(con)
            }
            None => Ok(slot.insert(connect(&self.client, timeout)?)),
        }
    }

    pub(super) fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        timeout: Duration,
    ) -> RedisResult<T> {
        let mut slot = self.con.lock().unwrap_or_else(|e| e.into_inner());
        let con = self.open(&mut slot, timeout)?;
        let result = cmd.query(con);
        if result.is_err() {
            // A late reply must never be read as the answer to the next command.
            *slot = None;
        }
        result
    }

    /// Sends the acquire `cmd`; if its reply is lost (the master is slow or gone), also
    /// writes `undo` (the release) on the same connection before dropping it, without
    /// waiting for an answer. A slow master may still run the acquire late; it then runs
    /// the release right after it, from the same connection, so a late grant never
    /// outlives the failed call. A release sent later on a new connection could not
    /// promise that: the master may be too busy to accept it before the caller gives up.
    pub(super) fn acquire(
        &self,
        cmd: &redis::Cmd,
        undo: &redis::Cmd,
        timeout: Duration,
    ) -> RedisResult<Option<Grant>> {
        let mut slot = self.con.lock().unwrap_or_else(|e| e.into_inner());
        let con = self.open(&mut slot, timeout)?;
        let result = cmd.query(con);
        if let Err(err) = &result {
            if outcome_unknown(err) {
                let _ = con.send_packed_command(&undo.get_packed_command());
            }
            *slot = None;
        }
        result
    }
}
