<?php

require_once __DIR__ . '/../autoload.php';

/**
 * The classic "order lock" helper, ported from SET NX + a compare-and-delete Lua script
 * to the redis-lock module's commands, on phpredis (`rawCommand`).
 *
 * Before (the helper this replaces):
 *
 *     $lockId = uniqid('', true);
 *     $ok = $redis->set("order_lock:$orderId", $lockId, ['nx', 'px' => $ttlMs]);
 *     return $ok ? $lockId : false;
 *     // release: EVAL "if redis.call('get',KEYS[1]) == ARGV[1] then
 *     //                  return redis.call('del',KEYS[1]) else return 0 end"
 *
 * After: the same shape (acquire returns a lock id, release compares it), but the
 * server makes the id, compares it atomically without a script, can make the caller
 * wait for a busy order, and hands out a fencing token with every grant.
 */
final class OrderLock
{
    private RedisLock\Commands $commands;
    private string $prefix;

    public function __construct(Redis $redis, string $prefix = 'order_lock:')
    {
        $this->commands = new RedisLock\Commands($redis);
        $this->prefix = $prefix;
    }

    /**
     * Locks an order. Returns the lock id (keep it to release), or false when another
     * holder has it (after waiting up to $waitMs, if given; 0 waits without limit).
     *
     * $sessionMs binds the lock to this Redis connection: when the connection closes
     * (the PHP process ends or is killed, the worker crashes, the network drops), the
     * server releases the lock $sessionMs later instead of at the end of the TTL, and the
     * next waiter gets it. Use it for work of unknown length under a long TTL, rather than
     * renewing a short TTL: a crashed worker then blocks the order for $sessionMs, not for
     * the whole TTL. Nobody else gets the lock during those $sessionMs (a lock-delay: the
     * cut-off worker may still be acting); acquiring again with the same lock id
     * (acquireWithFence's 'lock_id' passed as $lockId) within them reclaims it. Not for
     * persistent connections (pconnect) shared across requests: the connection outlives
     * the request.
     */
    public function acquire($orderId, int $ttlMs = 10000, ?int $waitMs = null, ?int $sessionMs = null)
    {
        $grant = $this->acquireWithFence($orderId, $ttlMs, $waitMs, $sessionMs);
        return $grant === null ? false : $grant['lock_id'];
    }

    /**
     * Like acquire(), but also returns the fencing token: ['lock_id' => ..., 'fence' => int],
     * or null when busy. Store the fence with every write the lock protects and refuse
     * writes with a lower one. $lockId acquires with your own id (acquiring again with
     * the id that holds the lock renews it, same fence: a reclaim).
     */
    public function acquireWithFence(
        $orderId,
        int $ttlMs = 10000,
        ?int $waitMs = null,
        ?int $sessionMs = null,
        ?string $lockId = null
    ): ?array {
        $reply = $this->commands->acquire($this->key($orderId), $ttlMs, $lockId, $waitMs, $sessionMs);
        if ($reply === null) {
            return null;
        }
        return ['lock_id' => $reply[0], 'fence' => $reply[1]];
    }

    /** Releases the order's lock if $lockId still holds it; true if it did. */
    public function release($orderId, string $lockId): bool
    {
        return $this->commands->release($this->key($orderId), $lockId);
    }

    /** Resets the lock's remaining time to $ttlMs if $lockId still holds it. */
    public function extend($orderId, string $lockId, int $ttlMs): bool
    {
        return $this->commands->extend($this->key($orderId), $lockId, $ttlMs);
    }

    /**
     * ['ttl' => ms, 'fence' => int, 'acquired' => unix ms, 'waiters' => int,
     *  'session' => grace ms or -1, 'connected' => 1, 0 (grace running) or -1], or null.
     */
    public function info($orderId): ?array
    {
        return $this->commands->info($this->key($orderId));
    }

    private function key($orderId): string
    {
        return $this->prefix . $orderId;
    }
}
