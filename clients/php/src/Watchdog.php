<?php

declare(strict_types=1);

namespace RedisLock;

use Redis;

/**
 * Keeps one lock alive from a helper process, the way the other packages' watchdogs do
 * from a thread or a timer (PHP has none that runs while the script waits on I/O):
 * `RedisLock::watch($name)` starts it.
 *
 * The helper (`bin/watchdog.php`, the same PHP binary) opens its own connection to the
 * lock's server and extends the lock to its TTL every third of the TTL. The lock counts
 * as lost, and the helper stops, when an extend answers 0 (the lock expired or went to
 * another holder), or when no extend has succeeded for a whole TTL (an extend still
 * waiting for its answer counts: it is bounded by the time left). `isLost()` tells.
 * The token and the password reach the helper through a pipe, never its command line.
 */
final class Watchdog
{
    /** @var resource */
    private $process;
    /** @var resource */
    private $toHelper;
    /** @var resource */
    private $fromHelper;
    /** @var bool */
    private $lost = false;
    /** @var bool */
    private $stopped = false;

    /** @param array{host: string, port: int, auth: mixed, db: int, key: string, token: string, ttl: int, since: int} $job */
    public function __construct(array $job)
    {
        $php = PHP_SAPI === 'cli' ? PHP_BINARY : PHP_BINDIR . '/php';
        $pipes = [];
        $process = proc_open([$php, dirname(__DIR__) . '/bin/watchdog.php'], [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['file', 'php://stderr', 'w']], $pipes);
        if (!is_resource($process)) {
            throw new LockException('watch: cannot start the watchdog process');
        }
        $this->process = $process;
        [$this->toHelper, $this->fromHelper] = [$pipes[0], $pipes[1]];
        stream_set_blocking($this->fromHelper, false);
        fwrite($this->toHelper, json_encode($job, JSON_THROW_ON_ERROR) . "\n");
        fflush($this->toHelper);
    }

    /** True once the watchdog found the lock lost (it no longer extends it). */
    public function isLost(): bool
    {
        if ($this->lost || $this->stopped) {
            return $this->lost;
        }
        $said = stream_get_contents($this->fromHelper);
        if (is_string($said) && strpos($said, 'lost') !== false) {
            $this->lost = true;
        } elseif (!proc_get_status($this->process)['running']) {
            // A helper that ended without being stopped keeps nothing alive.
            $this->lost = true;
        }
        return $this->lost;
    }

    /** Stops extending (the lock is left as it is: `unlock` releases it). */
    public function stop(): void
    {
        if ($this->stopped) {
            return;
        }
        $this->isLost();
        $this->stopped = true;
        fclose($this->toHelper);
        fclose($this->fromHelper);
        proc_terminate($this->process);
        proc_close($this->process);
    }

    public function __destruct()
    {
        $this->stop();
    }

    /**
     * What the helper needs to reach the server `$redis` is connected to.
     *
     * @param Redis|\RedisCluster $redis
     * @return array{host: string, port: int, auth: mixed, db: int}
     */
    public static function serverOf($redis): array
    {
        if (!$redis instanceof Redis) {
            throw new LockException('watch: a watchdog needs a Redis connection, not a RedisCluster');
        }
        $auth = $redis->getAuth();
        return ['host' => (string) $redis->getHost(), 'port' => (int) $redis->getPort(), 'auth' => $auth === false ? null : $auth, 'db' => (int) $redis->getDBNum()];
    }
}
