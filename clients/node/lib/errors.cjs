'use strict';
// The package's errors: every failure it reports is a LockError (or a TypeError or
// RangeError for a bad argument, thrown before any command is sent).

class LockError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = this.constructor.name;
  }
}

/** The lock is held by another token (after waiting, if a wait was asked for). */
class ResourceLockedError extends LockError {}

/**
 * Too few replicas acknowledged a grant (or an extend) in time (`replicas`): an acquire's
 * grant was released at once, and nothing is held. `acked` of `required` did; `refused`
 * is true when the master had too few replicas online for an explicit `replicas: n`, so
 * nothing was sent.
 */
class NotReplicatedError extends ResourceLockedError {
  constructor(message, acked, required, refused) {
    super(message);
    this.acked = acked;
    this.required = required;
    this.refused = refused;
  }
}

/** The lock was gone when it was released or extended, or when `using` renewed it. */
class LockLostError extends LockError {}

/**
 * Redlock could not reach a quorum of its masters within its retries (node-redlock's
 * name); `attempts` holds what each attempt's masters answered.
 */
class ExecutionError extends LockError {
  constructor(message, attempts) {
    super(message);
    this.attempts = attempts;
  }
}

/** A server's error reply, wrapped: `cause` is the client library's own error. */
function serverError(key, error) {
  return new LockError(`${key}: the server refused the command: ${error.message}`, { cause: error });
}

module.exports = { LockError, ResourceLockedError, NotReplicatedError, LockLostError, ExecutionError, serverError };
