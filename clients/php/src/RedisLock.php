<?php

declare(strict_types=1);

namespace RedisLock;

use Redis;

/**
 * The RedisLock of the PHP articles (`lock`, `unlock`, `unlockAll`, `expire`,
 * `isLocking`), on the module's commands instead of SETNX + EXPIRE + DEL:
 *
 * - taking a lock is one atomic command, so a crash between SETNX and EXPIRE can no
 *   longer leave a lock without expiry;
 * - `unlock` deletes the lock only if this object still holds it (the seed's DEL freed
 *   whoever held it by then);
 * - a lock that is busy is waited for in the server (`LOCK.ACQUIRE ... WAIT`), first come
 *   first served, and granted the moment it is free: `$waitIntervalUs` is accepted for
 *   the old signature and no longer needed;
 * - each lock has a fence (`fence($name)`) for the writes it protects.
 *
 * Tokens are kept per name inside the object: use one object per worker, not one shared
 * by several. Keys are `Lock:<name>` (the prefix is the constructor's second argument).
 */
class RedisLock
{
    /** @var Commands */
    private $commands;
    /** @var string */
    private $prefix;
    /** @var int|null */
    private $sessionMs;
    /** @var array<string, array{0: string, 1: int}> name => [token, fence] */
    private $lockedNames = [];

    /**
     * $sessionSeconds binds every lock to this connection: if the PHP process dies, the
     * server frees its locks that many seconds later (0: at once), whatever their
     * expiry. Not with `pconnect`: a persistent connection outlives the request.
     */
    public function __construct(Redis $redis, string $prefix = 'Lock:', ?float $sessionSeconds = null)
    {
        $this->commands = new Commands($redis);
        $this->prefix = $prefix;
        $this->sessionMs = $sessionSeconds === null ? null : self::ms($sessionSeconds, 'sessionSeconds', 0);
    }

    /**
     * Takes the lock `$name` for `$expire` seconds, waiting up to `$timeout` seconds for
     * it when it is busy (0: do not wait). True once held. Taking a lock this object
     * already holds renews it to `$expire` and answers true.
     */
    public function lock(string $name, $timeout = 0, $expire = 15, int $waitIntervalUs = 100000): bool
    {
        if ($name === '') {
            throw new LockException('lock: the name must not be empty');
        }
        $ttlMs = self::ms($expire, 'expire', 1);
        $waitMs = $timeout > 0 ? self::ms($timeout, 'timeout', 1) : null;
        $token = isset($this->lockedNames[$name]) ? $this->lockedNames[$name][0] : bin2hex(random_bytes(16));
        $granted = $this->commands->acquire($this->prefix . $name, $ttlMs, $token, $waitMs, $this->sessionMs);
        if ($granted === null) {
            unset($this->lockedNames[$name]);
            return false;
        }
        $this->lockedNames[$name] = $granted;
        return true;
    }

    /** Releases `$name`; true if this object still held it. */
    public function unlock(string $name): bool
    {
        if (!isset($this->lockedNames[$name])) {
            return false;
        }
        $token = $this->lockedNames[$name][0];
        unset($this->lockedNames[$name]);
        return $this->commands->release($this->prefix . $name, $token);
    }

    /** Releases every lock this object holds; true if all of them were still held. */
    public function unlockAll(): bool
    {
        $allReleased = true;
        foreach (array_keys($this->lockedNames) as $name) {
            if (!$this->unlock((string) $name)) {
                $allReleased = false;
            }
        }
        return $allReleased;
    }

    /** Sets what is left of `$name`'s time to `$expire` seconds (at least 1 ms); true if held. */
    public function expire(string $name, $expire): bool
    {
        if (!isset($this->lockedNames[$name])) {
            return false;
        }
        return $this->commands->extend($this->prefix . $name, $this->lockedNames[$name][0], self::ms($expire, 'expire', 1));
    }

    /**
     * True if this object holds `$name` now. It compares fences (unique per grant), so
     * no token is read back from the server.
     */
    public function isLocking(string $name): bool
    {
        if (!isset($this->lockedNames[$name])) {
            return false;
        }
        $info = $this->commands->info($this->prefix . $name);
        return $info !== null && ($info['fence'] ?? null) === $this->lockedNames[$name][1];
    }

    /** The fencing token of `$name`'s current grant to this object, null if not held. */
    public function fence(string $name): ?int
    {
        return isset($this->lockedNames[$name]) ? $this->lockedNames[$name][1] : null;
    }

    /** @param int|float $seconds */
    private static function ms($seconds, string $what, int $minimum): int
    {
        if (!is_int($seconds) && !is_float($seconds)) {
            throw new LockException("$what must be a number of seconds");
        }
        $ms = (int) ceil($seconds * 1000);
        if ($ms < $minimum || $ms > (1 << 47) - 1) {
            throw new LockException("$what out of range: $seconds");
        }
        return $ms;
    }
}
