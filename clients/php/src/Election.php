<?php

declare(strict_types=1);

namespace RedisLock;

use Redis;

/**
 * Leader election on one lock, as etcd's Campaign / Proclaim / Resign / Leader /
 * Observe, on a phpredis connection:
 *
 *     $election = new Election($redis, 'service:leader', 30.0, 5.0);
 *     $leadership = $election->campaign('10.0.0.7:8080');   // blocks until elected
 *     // ... lead: send $leadership->term() with every write; refresh() every third of the TTL ...
 *     $leadership->resign();
 *
 *     foreach ($election->observe() as $leader) {       // every new leader
 *         // [term, value], or null while nobody leads
 *     }
 *
 * Candidates queue for the lock (first come, first elected). The leader's lock is bound
 * to this connection (`SESSION`): if the PHP process dies, the next candidate is elected
 * `$lockDelay` seconds later. PHP has no background thread: a leader that runs longer
 * than its TTL calls `refresh()` at least every third of it (false: the term is lost,
 * stop leading). Not with `pconnect`: a persistent connection outlives the request.
 */
final class Election
{
    /** How long one LOCK.WATCH of `observe` waits before asking again, in ms. */
    private const OBSERVE_ROUND_MS = 30000;

    /** @var Commands */
    private $commands;
    /** @var string */
    private $key;
    /** @var int */
    private $ttlMs;
    /** @var int */
    private $lockDelayMs;
    /** @var Replicas */
    private $replicas;
    /** @var Leadership|null the last campaign's term, while it lasts */
    private $leading;

    /**
     * @param Redis|array<string, mixed>|null $param a connected `Redis`, or the config
     *        array of `Connection`
     */
    /**
     * @param string|int $replicas a term counts once this many replicas have it ('auto':
     *                             1 when the master has one online; see Replicas)
     */
    public function __construct($param, string $name, float $ttl = 30.0, float $lockDelay = 5.0, $replicas = Replicas::AUTO, ?float $replicasTimeout = null)
    {
        $this->replicas = new Replicas($replicas, $replicasTimeout);
        $this->commands = new Commands(Connection::open($param));
        $this->key = $this->commands->key($name);
        $this->ttlMs = self::ms($ttl, 'ttl', 1);
        $this->lockDelayMs = self::ms($lockDelay, 'lockDelay', 0);
    }

    /**
     * Campaigns with `$value` published: blocks until elected and returns the
     * Leadership (its `term()` is the fence to send with every write), or null if
     * `$timeout` seconds passed first (0: no limit).
     */
    public function campaign(string $value, float $timeout = 0.0): ?Leadership
    {
        if (strlen($value) > 4096) {
            throw new \InvalidArgumentException('value must be 0 to 4096 bytes');
        }
        $token = bin2hex(random_bytes(16));
        $waitMs = self::ms($timeout, 'timeout', 0);
        $granted = Replicas::retrying($waitMs, function (?int $left) use ($token, $value) {
            return $this->commands->acquire($this->key, $this->ttlMs, $token, $left, $this->lockDelayMs, [], $value, $this->replicas);
        });
        if ($granted === null) {
            return null;
        }
        $this->leading = new Leadership($this->commands, $this->key, $token, $granted[1], $this->ttlMs, $this->lockDelayMs, $this->replicas);
        return $this->leading;
    }

    /** The last campaign's term while it lasts, else null. */
    public function term(): ?int
    {
        return $this->leading === null || $this->leading->isLost() ? null : $this->leading->term();
    }

    /** The last campaign's `Leadership::proclaim`; false when not leading. */
    public function proclaim(string $value): bool
    {
        return $this->leading !== null && $this->leading->proclaim($value);
    }

    /** The last campaign's `Leadership::refresh`; false when not leading. */
    public function refresh(): bool
    {
        return $this->leading !== null && $this->leading->refresh();
    }

    /** The last campaign's `Leadership::resign`; false when not leading. */
    public function resign(): bool
    {
        return $this->leading !== null && $this->leading->resign();
    }

    /**
     * The leader now, [term, value], or null when nobody leads.
     *
     * @return array{0: int, 1: ?string}|null
     */
    public function leader(): ?array
    {
        // No term is ever 2^63 - 1 (fences stay below 2^53): the state differs from it,
        // so LOCK.WATCH answers at once, the value as the bytes it is.
        $watched = $this->commands->watch($this->key, PHP_INT_MAX, 1);
        return $watched === null || $watched[0] === 0 ? null : $watched;
    }

    /**
     * Every change of leader after `$term` (0: nobody, so the first is the leader now,
     * if any), as it happens: [term, value], or null while nobody leads. It re-asks
     * LOCK.WATCH with the last term seen; a lost connection or a failover's reply is
     * ridden out (phpredis reconnects), pausing from 100 ms up to 2 s between tries, and
     * any other error reply ends it as a LockException (`riddenOut`). `break` out of the
     * loop to stop.
     *
     * @return \Generator<int, array{0: int, 1: ?string}|null>
     */
    public function observe(int $term = 0): \Generator
    {
        $last = $term;
        $pauseMs = 0;
        for (;;) {
            try {
                $seen = $this->commands->watch($this->key, $last, self::OBSERVE_ROUND_MS);
            } catch (\RedisException | LockException $e) {
                if (!self::riddenOut($e)) {
                    throw $e;
                }
                $pauseMs = min(2000, max(100, $pauseMs * 2));
                usleep($pauseMs * 1000);
                continue;
            }
            $pauseMs = 0;
            if ($seen === null) {
                continue; // the round passed with no change
            }
            $last = $seen[0];
            yield $seen[0] === 0 ? null : $seen;
        }
    }

    /**
     * Whether `observe` asks again after `$e`: a lost connection (phpredis reconnects),
     * or a reply of what a failover, a restart or a slot move answers a watcher
     * (docs/election.md); any other error reply (WRONGTYPE, NOPERM, ...) ends it. Every
     * package rides out the same.
     */
    private static function riddenOut(\Exception $e): bool
    {
        if (!$e instanceof LockException) {
            return true;
        }
        // A LockException's message is "<command>: <the server's reply>".
        return preg_match('/^[A-Z.]+: (UNBLOCKED|MOVED|ASK|READONLY|LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN)( |$)/', $e->getMessage()) === 1;
    }

    private static function ms(float $seconds, string $what, int $minimum): int
    {
        $ms = (int) round($seconds * 1000);
        if ($ms < $minimum || $ms > 2 ** 53 - 1) {
            throw new \InvalidArgumentException("$what must be from " . ($minimum / 1000) . ' s to 2^53 - 1 ms');
        }
        return $ms;
    }
}
