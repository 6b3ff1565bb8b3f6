<?php

declare(strict_types=1);

namespace RedisLock;

/**
 * `replicas`: a grant counts once the master's replicas have it (docs/clients.md,
 * "Failover-safe by default"). Every write that makes or keeps a grant (`lock`,
 * `lockAll`, `expire`, the watchdog's extends) goes with `WAIT n timeout` on the same
 * connection, pipelined in the same round trip (on a RedisCluster, which has no
 * pipelines in phpredis, right after it on the key's node connection). When fewer than
 * `n` replicas acknowledge a grant in time, it is released at once by its token.
 *
 * 'auto' (the default) asks for 1 when the master has a replica online and for nothing
 * on a master without one. What the connection learned of its master (`ROLE`, or
 * `WAIT 0 0` for a user whose ACL denies `ROLE`) is forgotten after an error or a
 * shortfall and after RELEARN_SECONDS; a master that lists fewer replicas than before is
 * taken at its former count for HOLD_SECONDS (a deposed master loses its replicas just
 * before it is demoted). An explicit number asks for that many; a master with fewer online
 * refuses at once.
 */
final class Replicas
{
    public const AUTO = 'auto';
    public const RELEARN_SECONDS = 5.0;
    public const HOLD_SECONDS = 15.0;
    private const MAX_DEFAULT_TIMEOUT_MS = 1000;

    /** @var string|int */
    private $setting;
    /** @var int|null */
    private $timeoutMs;
    /** @var int the longest the default timeout may be (Redlock: half a master's timeout) */
    private $capMs = self::MAX_DEFAULT_TIMEOUT_MS;
    /** @var array<string, array{0: int, 1: float}> what each key's master was seen with: [online, when] */
    private $learned = [];
    /** @var array<string, array{0: int, 1: ?float, 2: int}> address => [most replicas seen, fewer since, last seen] */
    private static $seen = [];

    /**
     * @param string|int $setting 'auto', or a number of replicas from 0 (off)
     * @param float|null $timeoutSeconds how long to wait for them; default a tenth of the
     *                                   lock's expiry, at most 1 s
     */
    /** @var bool wait with WAITAOF: the master's own fsync and the replicas' */
    private $fsync;

    public function __construct($setting = self::AUTO, ?float $timeoutSeconds = null, bool $fsync = false)
    {
        $this->fsync = $fsync;
        if ($setting !== self::AUTO && !(is_int($setting) && $setting >= 0)) {
            throw new LockException("replicas must be 'auto' or a number of replicas from 0, not " . var_export($setting, true));
        }
        if ($timeoutSeconds !== null && !($timeoutSeconds > 0 && $timeoutSeconds <= 3600)) {
            throw new LockException("replicasTimeout must be above 0 and at most 3600 seconds, not $timeoutSeconds");
        }
        $this->setting = $setting;
        $this->timeoutMs = $timeoutSeconds === null ? null : max(1, (int) round($timeoutSeconds * 1000));
    }

    /** Caps the default timeout at `$ms` (an explicit one is left as it is). */
    public function cap(int $ms): void
    {
        $this->capMs = max(1, min($ms, self::MAX_DEFAULT_TIMEOUT_MS));
    }

    /** No wait at all: no replicas asked for, and no fsync. */
    public function off(): bool
    {
        return $this->setting === 0 && !$this->fsync;
    }

    public function fsync(): bool
    {
        return $this->fsync;
    }

    /** Whether no replica is asked for (`replicas` 0), whatever `fsync` says. */
    public function asksNoReplica(): bool
    {
        return $this->setting === 0;
    }

    /** How many acknowledgements a grant needs from a master with `$online` replicas. */
    public function required(int $online, string $label): int
    {
        if ($this->setting === 0) {
            return 0;
        }
        if ($this->setting === self::AUTO) {
            return $online > 0 ? 1 : 0;
        }
        if ($online < $this->setting) {
            throw new NotReplicatedException(
                "$label: the master has $online replicas online and replicas {$this->setting} asks for {$this->setting}: not acquired",
                $online,
                (int) $this->setting,
                true
            );
        }
        return (int) $this->setting;
    }

    /** @return list<list<string>> the WAIT a grant of a `$ttlMs` lock needs, or none */
    public function waitCommands(int $required, int $ttlMs): array
    {
        if ($this->fsync) {
            // A replica reports its fsync once a second: a third of the TTL, at most 2 s.
            $timeout = $this->timeoutMs ?? max(1, min(intdiv($ttlMs, 3), 2 * $this->capMs));
            return [['WAITAOF', '1', (string) $required, (string) $timeout]];
        }
        if ($required === 0) {
            return [];
        }
        $timeout = $this->timeoutMs ?? max(1, min(intdiv($ttlMs, 10), $this->capMs));
        return [['WAIT', (string) $required, (string) $timeout]];
    }

    /**
     * `$commands` asking the server to hold each reply until `$required` replicas have
     * it (`REPLICAS n REPLTIMEOUT ms`), for a `$ttlMs` lock.
     *
     * @param list<list<string>> $commands
     * @return list<list<string>>
     */
    public function withReplicas(array $commands, int $required, int $ttlMs): array
    {
        $timeout = $this->timeoutMs ?? max(1, min(intdiv($ttlMs, 10), $this->capMs));
        return array_map(function (array $command) use ($required, $timeout) {
            return array_merge($command, ['REPLICAS', (string) $required, 'REPLTIMEOUT', (string) $timeout]);
        }, $commands);
    }

    /**
     * The shortfall of a wait's `$answer`, or null when it counts what was asked:
     * [acknowledged, refused (WAITAOF failed: trying again will not mend it), why].
     *
     * @param mixed $answer
     * @return array{0: int, 1: bool, 2: string}|null
     */
    public function shortfall(int $required, $answer): ?array
    {
        if ($this->fsync) {
            if (!is_array($answer)) {
                $why = $answer instanceof \Throwable ? $answer->getMessage() : var_export($answer, true);
                return [0, true, "WAITAOF failed (fsync needs Redis 7.2+ or Valkey 8+ with appendonly yes): $why"];
            }
            [$local, $acked] = [(int) $answer[0], (int) $answer[1]];
            return $local >= 1 && $acked >= $required ? null
                : [$acked, false, "the master fsynced it $local times and $acked of $required replicas did, in time"];
        }
        $acked = is_int($answer) ? $answer : 0;
        return $acked >= $required ? null : [$acked, false, "only $acked of $required replicas acknowledged it in time"];
    }

    /** What was learned of `$key`'s master, if still trusted. */
    public function known(string $key): ?int
    {
        if (!isset($this->learned[$key]) || microtime(true) - $this->learned[$key][1] > self::RELEARN_SECONDS) {
            return null;
        }
        return $this->learned[$key][0];
    }

    /** Keeps what was learned; returns the count to go by. */
    public function learn(string $key, string $address, int $online): int
    {
        $count = self::held($address, $online);
        $this->learned[$key] = [$count, microtime(true)];
        return $count;
    }

    public function forget(string $key): void
    {
        unset($this->learned[$key]);
    }

    /**
     * `$online`, or the server's former count within HOLD_SECONDS of its last drop (a
     * count that falls again, say from 1 to 0 after 2 to 1, starts the hold afresh).
     */
    private static function held(string $address, int $online): int
    {
        $seen = self::$seen[$address] ?? null;
        if ($seen === null || $online >= $seen[0]) {
            self::$seen[$address] = [$online, null, $online];
            return $online;
        }
        $now = microtime(true);
        $since = ($seen[1] === null || $online < $seen[2]) ? $now : $seen[1];
        if ($now - $since < self::HOLD_SECONDS) {
            self::$seen[$address] = [$seen[0], $since, $online];
            return $seen[0];
        }
        self::$seen[$address] = [$online, null, $online];
        return $online;
    }

    /**
     * `$grant($waitLeftMs)` until a grant is not refused for too few replicas
     * acknowledging it, or the wait (`$waitMs`, null: none, 0: without end) is over.
     *
     * @return mixed
     */
    public static function retrying(?int $waitMs, callable $grant)
    {
        $started = hrtime(true);
        while (true) {
            $spent = intdiv(hrtime(true) - $started, 1000000);
            $left = $waitMs === null || $waitMs === 0 ? $waitMs : max(1, $waitMs - $spent);
            try {
                return $grant($left);
            } catch (NotReplicatedException $e) {
                if ($e->refused || $waitMs === null || ($waitMs > 0 && intdiv(hrtime(true) - $started, 1000000) >= $waitMs)) {
                    throw $e;
                }
            }
        }
    }

    /** The replicas online in a `ROLE` reply (a master lists them), or a `WAIT 0 0` answer. */
    public static function onlineFrom($reply): int
    {
        if (is_int($reply)) {
            return $reply;
        }
        return is_array($reply) && ($reply[0] ?? null) === 'master' && is_array($reply[2] ?? null) ? count($reply[2]) : 0;
    }
}
