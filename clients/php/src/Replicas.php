<?php

declare(strict_types=1);

namespace RedisLock;

/**
 * `replicas`: a grant counts once the master's replicas have it (docs/clients.md,
 * "Failover-safe by default"). Every write that makes or keeps a grant (`lock`,
 * `lockAll`, `expire`, the watchdog's extends) asks the server to hold its reply until
 * its replicas have it (`REPLICAS AUTO`, the default: one replica when the master has
 * one, none without, by the server's own rule; or the number given; `REPLTIMEOUT ms`).
 * The server undoes a grant too few replicas acknowledged in time and answers
 * NOTREPLICATED. The package keeps no knowledge of replicas of its own there: no ROLE, no
 * INFO, no WAIT. A server that cannot wait (Redis 7.0, a module before 0.3.0) refuses the
 * option, changing nothing; from then on the package waits itself (Redis70).
 */
final class Replicas
{
    public const AUTO = 'auto';
    private const MAX_DEFAULT_TIMEOUT_MS = 1000;

    /** @var string|int */
    private $setting;
    /** @var string what `REPLICAS` says on the wire: the server's own rule, or the number */
    private $rule;
    /** @var int|null */
    private $timeoutMs;
    /** @var int the longest the default timeout may be (Redlock: half a master's timeout) */
    private $capMs = self::MAX_DEFAULT_TIMEOUT_MS;
    /** @var Redis70|null what the package learned itself, where the server cannot wait */
    private $redis70;

    /** @var bool wait with WAITAOF: the master's own fsync and the replicas' */
    private $fsync;

    /**
     * @param string|int $setting 'auto', or a number of replicas from 0 (off)
     * @param float|null $timeoutSeconds how long to wait for them; default a tenth of the
     *                                   lock's expiry, at most 1 s
     */
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
        $this->rule = $setting === self::AUTO ? 'AUTO' : (string) $setting;
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

    /** What the package learns of the masters itself, where the server cannot wait (Redis 7.0). */
    public function redis70(): Redis70
    {
        return $this->redis70 ?? ($this->redis70 = new Redis70());
    }

    /**
     * `$commands` asking the server to hold each reply until its replicas have it
     * (`REPLICAS AUTO`, or the number given, and `REPLTIMEOUT`), for a `$ttlMs` lock; with
     * fsync, a `WAITAOF 1 0` behind them for the master's own fsync.
     *
     * @param list<list<string>> $commands
     * @return list<list<string>>
     */
    public function serverWrites(array $commands, int $ttlMs): array
    {
        $writes = [];
        foreach ($commands as $command) {
            $writes[] = $this->serverWrite($command, $ttlMs);
        }
        if ($this->fsync) {
            $writes[] = ['WAITAOF', '1', '0', (string) $this->timeoutFor($ttlMs)];
        }
        return $writes;
    }

    /**
     * One write asking the server to hold its reply until its replicas have it: `$command`
     * with `REPLICAS` and `REPLTIMEOUT`, for a `$ttlMs` lock.
     *
     * @param list<string> $command
     * @return list<string>
     */
    public function serverWrite(array $command, int $ttlMs): array
    {
        array_push($command, 'REPLICAS', $this->rule, 'REPLTIMEOUT', (string) $this->timeoutFor($ttlMs));
        return $command;
    }

    /** How long the server may hold a `$ttlMs` lock's reply for its replicas (ms). */
    private function timeoutFor(int $ttlMs): int
    {
        return $this->fsync
            ? ($this->timeoutMs ?? max(1, min(intdiv($ttlMs, 3), 2 * $this->capMs)))
            : ($this->timeoutMs ?? max(1, min(intdiv($ttlMs, 10), $this->capMs)));
    }

    /**
     * `$grant($waitLeftMs)` until a grant is not refused for too few replicas
     * acknowledging it, or the wait (`$waitMs`, null: none, 0: without end) is over.
     *
     * @return mixed
     */
    public static function retrying(?int $waitMs, callable $grant)
    {
        if ($waitMs === null) {  // no wait: one try, its refusal the caller's
            return $grant(null);
        }
        $started = hrtime(true);
        while (true) {
            $spent = intdiv(hrtime(true) - $started, 1000000);
            $left = $waitMs === 0 ? 0 : max(1, $waitMs - $spent);
            try {
                return $grant($left);
            } catch (NotReplicatedException $e) {
                if ($e->refused || ($waitMs > 0 && intdiv(hrtime(true) - $started, 1000000) >= $waitMs)) {
                    throw $e;
                }
            }
        }
    }
}
