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
 * - each lock has a fence (`fence($name)`) for the writes it protects;
 * - `readLock`/`writeLock` take a read/write lock and `semaphore` one of n permits, in
 *   the same shape as `lock` (`unlock`, `expire`, `isLocking`, `fence` work on them).
 *
 * Tokens are kept per name inside the object: use one object per worker, not one shared
 * by several. Keys are `Lock:<name>` (the prefix is the constructor's second argument),
 * after the connection's own `OPT_PREFIX`, as for every other key.
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
    /** @var array<string, array{0: list<string>, 1: int}> name => [mode, ttl ms] of shared holdings */
    private $sharedNames = [];
    /** @var array<string, array{0: int, 1: int}> name => [ttl ms, hrtime ns when the grant was asked for] */
    private $grants = [];
    /** @var array<string, Watchdog> name => the watchdog keeping it */
    private $watchdogs = [];
    /** @var Replicas */
    private $replicas;
    /** @var array{replicas: string|int, replicasTimeout: ?float} as given, for the watchdog */
    private $replicaSettings;

    /**
     * $param: a connected `Redis` or `RedisCluster`, or the articles' config array (see
     * Connection), or nothing for 127.0.0.1:6379.
     * $sessionSeconds binds every lock to this connection: if the PHP process dies, the
     * server frees its locks that many seconds later (0: at once), whatever their
     * expiry. Not with `pconnect`: a persistent connection outlives the request.
     * $replicas ('auto', the default): a grant counts once a replica of the master has it,
     * so that a failover keeps it (see Replicas): the server holds the reply of every grant
     * and extend until a replica has it when the master has one, and answers at once when
     * it has none (`REPLICAS AUTO`; on Redis 7.0, which cannot, the package sends `WAIT 1`
     * itself); a number asks for that many (too few acknowledging in time:
     * NotReplicatedException), 0 turns it off. $replicasTimeout (seconds) bounds the wait:
     * by default a tenth of the expiry, at most 1 s. A grant too few replicas acknowledged
     * is released at once and taken again while the `$timeout` of `lock` lasts, then
     * NotReplicatedException is thrown.
     * $fsync waits with `WAITAOF 1 n` instead: the master's own fsync to its append-only
     * file and the replicas' (Redis 7.2+, Valkey 8+, `appendonly yes`; else refused).
     *
     * @param Redis|\RedisCluster|array<string, mixed>|null $param
     * @param string|int $replicas
     */
    public function __construct($param = null, string $prefix = 'Lock:', ?float $sessionSeconds = null, $replicas = Replicas::AUTO, ?float $replicasTimeout = null, bool $fsync = false)
    {
        $this->replicas = new Replicas($replicas, $replicasTimeout, $fsync);
        $this->replicaSettings = ['replicas' => $replicas, 'replicasTimeout' => $replicasTimeout, 'fsync' => $fsync];
        $this->commands = new Commands(Connection::open($param));
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
        return $this->take($name, $timeout, $expire, []);
    }

    /**
     * Takes `$name` as a reader of a read/write lock: beside other readers, never beside
     * a writer (`writeLock`, or `lock`, on the same name). As `lock` otherwise.
     */
    public function readLock(string $name, $timeout = 0, $expire = 15): bool
    {
        return $this->take($name, $timeout, $expire, ['SHARED']);
    }

    /**
     * Takes `$name` as the writer of a read/write lock: alone, after the readers that came
     * before it (readers that come after it wait for it). The same as `lock`.
     */
    public function writeLock(string $name, $timeout = 0, $expire = 15): bool
    {
        return $this->take($name, $timeout, $expire, []);
    }

    /**
     * Takes one of at most `$permits` places of the counting semaphore `$name` (1 to
     * 1,000,000; every holder of a name gives the same number, else a LockException
     * naming LIMIT). As `lock` otherwise.
     */
    public function semaphore(string $name, int $permits, $timeout = 0, $expire = 15): bool
    {
        if ($permits < 1 || $permits > 1000000) {
            throw new LockException("semaphore: permits must be from 1 to 1000000, not $permits");
        }
        return $this->take($name, $timeout, $expire, ['LIMIT', (string) $permits]);
    }

    /**
     * Takes every name of `$names` at once, or none (`LOCK.ACQUIREALL`), for `$expire`
     * seconds, waiting up to `$timeout` seconds (0: do not wait) in every name's queue,
     * holding none meanwhile: two workers that take the same names in different orders
     * never deadlock. `$shared`: as a reader of each. True once all are held; each name is
     * then held as by `lock` (`unlock`, `expire`, `isLocking`, `fence`, `do` work on it),
     * and `unlockAll($names)` / `expireAll($names, ...)` release or extend them together.
     * On a RedisCluster the names must share a slot (a hash tag in the prefix or names).
     *
     * @param list<string> $names
     */
    public function lockAll(array $names, $timeout = 0, $expire = 15, bool $shared = false): bool
    {
        if ($names === [] || count($names) > 64 || in_array('', $names, true) || count(array_unique($names)) !== count($names)) {
            throw new LockException('lockAll: 1 to 64 distinct, non-empty names');
        }
        $ttlMs = self::ms($expire, 'expire', 1);
        $waitMs = $timeout > 0 ? self::ms($timeout, 'timeout', 1) : null;
        $held = array_values(array_filter($names, function ($name) {
            return isset($this->lockedNames[$name]);
        }));
        $token = $held === [] ? bin2hex(random_bytes(16)) : $this->lockedNames[$held[0]][0];
        $keys = array_map(function ($name) {
            return $this->key($name);
        }, $names);
        $askedAt = hrtime(true);
        $granted = Replicas::retrying($waitMs, function (?int $left) use ($keys, $ttlMs, $token, $shared) {
            return $this->commands->acquireAll($keys, $ttlMs, $token, $left, $this->sessionMs, $shared, $this->replicas);
        });
        if ($granted === null) {
            return false;
        }
        foreach ($names as $i => $name) {
            $this->lockedNames[$name] = [$granted[0], $granted[1][$i]];
            $this->grants[$name] = [$ttlMs, $askedAt];
            if ($shared) {
                $this->sharedNames[$name] = [['SHARED'], $ttlMs];
            } else {
                unset($this->sharedNames[$name]);
            }
        }
        return true;
    }

    /** @param list<string> $mode */
    private function take(string $name, $timeout, $expire, array $mode): bool
    {
        if ($name === '') {
            throw new LockException('lock: the name must not be empty');
        }
        $ttlMs = self::ms($expire, 'expire', 1);
        $waitMs = $timeout > 0 ? self::ms($timeout, 'timeout', 1) : null;
        $token = isset($this->lockedNames[$name]) ? $this->lockedNames[$name][0] : bin2hex(random_bytes(16));
        $askedAt = hrtime(true);
        $key = $this->key($name);
        try {
            if ($waitMs !== null) {
                $granted = Replicas::retrying($waitMs, function (?int $left) use ($key, $ttlMs, $token, $mode) {
                    return $this->commands->acquire($key, $ttlMs, $token, $left, $this->sessionMs, $mode, null, $this->replicas);
                });
            } elseif ($mode === [] && $this->sessionMs === null && $this->commands->plain($this->replicas)) {
                $granted = $this->commands->acquirePlain($key, $ttlMs, $token, $this->replicas);
            } else {  // no wait: one try
                $granted = $this->commands->acquire($key, $ttlMs, $token, null, $this->sessionMs, $mode, null, $this->replicas);
            }
        } catch (NotReplicatedException $e) {
            $this->forget($name);
            throw $e;
        }
        if ($granted === null) {
            $this->forget($name);
            return false;
        }
        $this->lockedNames[$name] = $granted;
        $this->grants[$name] = [$ttlMs, $askedAt];
        if ($mode === []) {
            unset($this->sharedNames[$name]);
        } else {
            $this->sharedNames[$name] = [$mode, $ttlMs];
        }
        return true;
    }

    /** Releases `$name`; true if this object still held it. */
    /**
     * Runs a command fenced by the lock `$name` (`LOCK.DO`): atomically, and only while
     * this object's token holds it; returns the command's reply. When the lock is no
     * longer held (it expired, or went to another holder), nothing runs and a
     * LockException (`NOTHELD`) is thrown; so it is when this object does not hold it,
     * or the command fails (its error in the message).
     *
     * @return mixed
     */
    public function do(string $name, string ...$command)
    {
        if (!isset($this->lockedNames[$name])) {
            throw new LockException("LOCK.DO: this object does not hold the lock '$name'");
        }
        if ($command === []) {
            throw new \InvalidArgumentException('do() needs a command');
        }
        $args = array_merge(['LOCK.DO', $this->key($name), $this->lockedNames[$name][0]], $command);
        try {
            return $this->commands->call($args);
        } catch (\RedisException $e) {
            // phpredis may throw a server's error reply rather than answer it.
            if (preg_match('/^[A-Z]+ /', $e->getMessage()) === 1) {
                throw new LockException('LOCK.DO: ' . $e->getMessage());
            }
            throw $e;
        }
    }

    public function unlock(string $name): bool
    {
        if (!isset($this->lockedNames[$name])) {
            return false;
        }
        $token = $this->lockedNames[$name][0];
        $this->forget($name);
        return $this->commands->release($this->key($name), $token);
    }

    /**
     * Keeps `$name` (held by this object, from `lock` or any other way of taking it)
     * alive past its expiry until `unlock`, from a helper process (see Watchdog): it
     * extends the lock to the TTL it was taken with every third of that TTL, and the
     * returned Watchdog's `isLost()` turns true once the lock is lost (an extend answered
     * 0, or none succeeded for a whole TTL), which is when the work it protects must
     * stop. One Redis connection (not a RedisCluster); the helper opens its own.
     */
    public function watch(string $name): Watchdog
    {
        if (!isset($this->lockedNames[$name], $this->grants[$name])) {
            throw new LockException("watch: this object does not hold the lock '$name'");
        }
        if (isset($this->watchdogs[$name])) {
            return $this->watchdogs[$name];
        }
        [$ttlMs, $askedAt] = $this->grants[$name];
        $job = Watchdog::serverOf($this->commands->connection()) + [
            'key' => $this->key($name),
            'token' => $this->lockedNames[$name][0],
            'ttl' => $ttlMs,
            'since' => $askedAt,
        ] + $this->replicaSettings;
        return $this->watchdogs[$name] = new Watchdog($job);
    }

    /**
     * Releases every lock this object holds (or those of `$names`, as `lockAll` took
     * them); true if all of them were still held.
     *
     * @param list<string>|null $names
     */
    public function unlockAll(?array $names = null): bool
    {
        $allReleased = true;
        foreach ($names ?? array_keys($this->lockedNames) as $name) {
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
        return $this->commands->extend($this->key($name), $this->lockedNames[$name][0], self::ms($expire, 'expire', 1), $this->replicas);
    }

    /**
     * Sets what is left of the time of every name of `$names` to `$expire` seconds; true
     * if this object still held all of them.
     *
     * @param list<string> $names
     */
    public function expireAll(array $names, $expire): bool
    {
        $allHeld = true;
        foreach ($names as $name) {
            if (!$this->expire($name, $expire)) {
                $allHeld = false;
            }
        }
        return $allHeld;
    }

    /**
     * True if this object holds `$name` now. It compares fences (unique per grant), so
     * no token is read back from the server. For a reader or a semaphore's holder,
     * whose own fence LOCK.INFO does not show (it shows the newest holder's), it extends
     * the holding to its `$expire` instead.
     */
    public function isLocking(string $name): bool
    {
        if (!isset($this->lockedNames[$name])) {
            return false;
        }
        if (isset($this->sharedNames[$name])) {
            return $this->commands->extend($this->key($name), $this->lockedNames[$name][0], $this->sharedNames[$name][1]);
        }
        $info = $this->commands->info($this->key($name));
        return $info !== null && ($info['fence'] ?? null) === $this->lockedNames[$name][1];
    }

    /** The fencing token of `$name`'s current grant to this object, null if not held. */
    public function fence(string $name): ?int
    {
        return isset($this->lockedNames[$name]) ? $this->lockedNames[$name][1] : null;
    }

    /** Drops what this object kept of `$name`, its watchdog stopped first. */
    private function forget(string $name): void
    {
        if (isset($this->watchdogs[$name])) {
            $this->watchdogs[$name]->stop();
        }
        unset($this->lockedNames[$name], $this->sharedNames[$name], $this->grants[$name], $this->watchdogs[$name]);
    }

    /** The lock's key on the server: the prefixes, then the name. */
    private function key(string $name): string
    {
        return $this->commands->key($this->prefix . $name);
    }

    /** @param int|float $seconds */
    private static function ms($seconds, string $what, int $minimum): int
    {
        if (!is_int($seconds) && !is_float($seconds)) {
            throw new LockException("$what must be a number of seconds");
        }
        $ms = (int) ceil($seconds * 1000);
        if ($ms < $minimum || $ms > (1 << 53) - 1) {
            throw new LockException("$what out of range: $seconds");
        }
        return $ms;
    }
}
