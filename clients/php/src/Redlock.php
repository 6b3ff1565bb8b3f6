<?php

declare(strict_types=1);

namespace RedisLock;

use Redis;

/**
 * Redlock across independent masters, in the shape of the PHP Redlock libraries
 * (ronnylt/redlock-php: `lock($resource, $ttl)` answers an array or false,
 * `unlock($lock)`), on the module's commands and with every package's defaults
 * (docs/clients.md, "One behaviour in every package"):
 *
 *     $redlock = new Redlock([$redis1, $redis2, $redis3]);
 *     $lock = $redlock->lock('reports:daily', 10000);   // ms
 *     if ($lock !== false) {
 *         // work that fits in $lock['validity'] ms
 *         $redlock->unlock($lock);
 *     }
 *
 * One random token is sent to every master (`LOCK.ACQUIRE key ttl TOKEN t`), each
 * given `masterTimeout` ms to answer. The lock is held when a majority (N/2 + 1)
 * granted it with time to spare: validity = ttl - elapsed - drift, drift = ttl x
 * `driftFactor` + 2 ms, elapsed on a monotonic clock. Otherwise it is released on every
 * master and tried again after `retryDelay` +/- `retryJitter` ms, `retryCount` times.
 * A master that did not answer in time is sent the release on a new connection; once it
 * answers (wakes from a stop) it runs the acquire it had, then the release.
 *
 * PHP asks the masters one after another, so an attempt may take up to N x
 * `masterTimeout`; the validity counts it. Fences of independent masters do not
 * compare: when the resource must refuse late writers, use one master and
 * `RedisLock::fence`.
 */
final class Redlock
{
    /** @var list<Redis> */
    private $masters;
    /** @var int */
    private $retryCount;
    /** @var int */
    private $retryDelay;
    /** @var int */
    private $retryJitter;
    /** @var float */
    private $driftFactor;
    /** @var int|null */
    private $masterTimeout;
    /** @var string|int */
    private $replicaSetting;
    /** @var int|null ms */
    private $replicasTimeout;
    /** @var list<Replicas> each master's */
    private $replicas = [];
    /** @var int how many attempts the last `lock` made */
    private $attempts = 0;

    /**
     * @param list<Redis> $masters connected phpredis clients, one per master
     * @param array{retryCount?: int, retryDelay?: int, retryJitter?: int, driftFactor?: float, masterTimeout?: int} $settings
     *        retryCount 10, retryDelay 200 ms, retryJitter 100 ms, driftFactor 0.01,
     *        masterTimeout a tenth of the ttl, at most 500 ms
     */
    public function __construct(array $masters, array $settings = [])
    {
        if ($masters === []) {
            throw new \InvalidArgumentException('Redlock needs at least one master');
        }
        foreach ($masters as $master) {
            if (!$master instanceof Redis) {
                throw new \InvalidArgumentException('each master must be a connected Redis');
            }
        }
        $unknown = array_diff(array_keys($settings), ['retryCount', 'retryDelay', 'retryJitter', 'driftFactor', 'masterTimeout', 'replicas', 'replicasTimeout', 'fsync']);
        if ($unknown !== []) {
            throw new \InvalidArgumentException('unknown setting ' . implode(', ', $unknown));
        }
        $this->masters = array_values($masters);
        $this->retryCount = self::whole($settings['retryCount'] ?? 10, 'retryCount', 0);
        $this->retryDelay = self::whole($settings['retryDelay'] ?? 200, 'retryDelay', 0);
        $this->retryJitter = self::whole($settings['retryJitter'] ?? 100, 'retryJitter', 0);
        $this->masterTimeout = isset($settings['masterTimeout']) ? self::whole($settings['masterTimeout'], 'masterTimeout', 1) : null;
        // Each master's grant waits for its own replicas (Replicas), within its timeout.
        $this->replicaSetting = $settings['replicas'] ?? Replicas::AUTO;
        $this->replicasTimeout = isset($settings['replicasTimeout']) ? self::whole($settings['replicasTimeout'], 'replicasTimeout', 1) : null;
        foreach ($this->masters as $i => $master) {
            $this->replicas[$i] = new Replicas($this->replicaSetting, $this->replicasTimeout === null ? null : $this->replicasTimeout / 1000, (bool) ($settings['fsync'] ?? false));
        }
        $drift = $settings['driftFactor'] ?? 0.01;
        if (!is_float($drift) && !is_int($drift) || $drift < 0 || $drift >= 1) {
            throw new \InvalidArgumentException('driftFactor must be a number from 0 to 1');
        }
        $this->driftFactor = (float) $drift;
    }

    /**
     * Takes `$resource` for `$ttl` ms on a majority of the masters: ['resource', 'token',
     * 'ttl', 'validity' (ms the holder may rely on it), 'fences' (each granting master's,
     * by index)], or false after every attempt failed.
     *
     * @return array{resource: string, token: string, ttl: int, validity: int, fences: array<int, int>}|false
     */
    public function lock(string $resource, int $ttl)
    {
        if ($ttl < 1 || $ttl > (1 << 53) - 1) {
            throw new \InvalidArgumentException("ttl must be 1 to 9007199254740991 ms, not $ttl");
        }
        $token = bin2hex(random_bytes(16));
        $timeout = $this->timeoutFor($ttl);
        $drift = (int) round($ttl * $this->driftFactor) + 2;
        $this->attempts = 0;
        while (true) {
            $this->attempts++;
            $started = hrtime(true);
            $fences = [];
            foreach ($this->masters as $i => $master) {
                $replicas = $this->replicas[$i];
                $replicas->cap(intdiv($timeout, 2));
                $granted = $this->onMaster($master, $timeout, static function (Commands $commands) use ($resource, $ttl, $token, $replicas) {
                    return $commands->acquire($commands->key($resource), $ttl, $token, null, null, [], null, $replicas);
                });
                if (is_array($granted)) {
                    $fences[$i] = $granted[1];
                }
            }
            $validity = $ttl - intdiv(hrtime(true) - $started, 1000000) - $drift;
            if (count($fences) >= $this->quorum() && $validity > 0) {
                return ['resource' => $resource, 'token' => $token, 'ttl' => $ttl, 'validity' => $validity, 'fences' => $fences];
            }
            $this->releaseAll($resource, $token, $timeout);
            if ($this->attempts > $this->retryCount) {
                return false;
            }
            $pause = max(0, $this->retryDelay + random_int(-$this->retryJitter, $this->retryJitter));
            usleep($pause * 1000);
        }
    }

    /**
     * Releases `$lock` (what `lock` answered) on every master, each within the
     * per-master timeout of its ttl: how many still held it.
     *
     * @param array{resource: string, token: string, ttl: int} $lock
     */
    public function unlock(array $lock): int
    {
        return $this->releaseAll($lock['resource'], $lock['token'], $this->timeoutFor($lock['ttl']));
    }

    /** How long each master may take to answer for a lock of `$ttl` ms. */
    private function timeoutFor(int $ttl): int
    {
        return $this->masterTimeout ?? max(1, min(intdiv($ttl, 10), 500));
    }

    /** How many attempts the last `lock` made (each asked every master). */
    public function attempts(): int
    {
        return $this->attempts;
    }

    /** The masters that must grant a lock: a strict majority. */
    public function quorum(): int
    {
        return intdiv(count($this->masters), 2) + 1;
    }

    private function releaseAll(string $resource, string $token, int $timeout): int
    {
        $released = 0;
        foreach ($this->masters as $master) {
            $done = $this->onMaster($master, $timeout, static function (Commands $commands) use ($resource, $token) {
                return $commands->release($commands->key($resource), $token);
            });
            $released += $done === true ? 1 : 0;
        }
        return $released;
    }

    /**
     * `$call` on one master with `$timeoutMs` to answer; null when it failed or did not
     * answer in time (phpredis then drops the connection and opens a new one next time).
     *
     * @return mixed
     */
    private function onMaster(Redis $master, int $timeoutMs, callable $call)
    {
        $before = (float) $master->getOption(Redis::OPT_READ_TIMEOUT);
        if ($before == 0.0) {
            // phpredis's 0 ("use default_socket_timeout") set on a live socket would be
            // a zero wait: put back what 0 meant.
            $before = (float) ini_get('default_socket_timeout');
        }
        try {
            $master->setOption(Redis::OPT_READ_TIMEOUT, (string) ($timeoutMs / 1000));
            return $call(new Commands($master));
        } catch (\RedisException | LockException $e) {
            return null;
        } finally {
            try {
                $master->setOption(Redis::OPT_READ_TIMEOUT, (string) $before);
            } catch (\RedisException $e) {
                // a broken connection keeps its option for when it reconnects
            }
        }
    }

    private static function whole($value, string $what, int $minimum): int
    {
        if (!is_int($value) || $value < $minimum) {
            throw new \InvalidArgumentException("$what must be a whole number of ms from $minimum");
        }
        return $value;
    }
}
