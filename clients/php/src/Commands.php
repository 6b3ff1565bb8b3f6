<?php

declare(strict_types=1);

namespace RedisLock;

use Redis;
use RedisCluster;

/**
 * The module's commands through phpredis `rawCommand` (on a `Redis` or a
 * `RedisCluster`), with errors told apart from nil replies (phpredis answers `false` for
 * both), keys given the connection's `OPT_PREFIX` (which phpredis adds to the commands
 * it knows, not to `rawCommand`), and waits given a read timeout longer than themselves.
 */
final class Commands
{
    /** @var Redis|RedisCluster */
    private $redis;

    /** @param Redis|RedisCluster $redis */
    public function __construct($redis)
    {
        $this->redis = $redis;
    }

    /** @return Redis|RedisCluster the connection the commands go on */
    public function connection()
    {
        return $this->redis;
    }

    /** The key `$name` names on the server: with the connection's `OPT_PREFIX`. */
    public function key(string $name): string
    {
        return $this->redis->_prefix($name);
    }

    /**
     * LOCK.ACQUIRE: [token, fence], or null when another token holds the lock.
     * $token null lets the server make one; $waitMs null does not wait, 0 waits
     * without limit. $mode: [] for a mutex or a writer, ['SHARED'] for a reader,
     * ['LIMIT', n] for a semaphore's holder.
     *
     * @param list<string> $mode
     * @return array{0: string, 1: int}|null
     */
    public function acquire(string $key, int $ttlMs, ?string $token, ?int $waitMs = null, ?int $sessionMs = null, array $mode = [], ?string $value = null): ?array
    {
        $args = array_merge(['LOCK.ACQUIRE', $key, (string) $ttlMs], $mode);
        if ($value !== null) {
            array_push($args, 'VALUE', $value);
        }
        if ($token !== null) {
            array_push($args, 'TOKEN', $token);
        }
        if ($waitMs !== null) {
            array_push($args, 'WAIT', (string) $waitMs);
        }
        if ($sessionMs !== null) {
            array_push($args, 'SESSION', (string) $sessionMs);
        }
        $reply = $waitMs === null ? $this->call($args) : $this->waiting($args, $waitMs);
        if (!is_array($reply)) {
            return null;
        }
        return [(string) $reply[0], (int) $reply[1]];
    }

    /**
     * `LOCK.ACQUIREALL numkeys key [key ...] ttl-ms [TOKEN token] [WAIT ms] [SESSION ms]
     * [SHARED]`: [token, [fence, ...]] when every key is granted at once, null when one
     * is busy (after `$waitMs`, if given; 0 waits without limit).
     *
     * @param list<string> $keys
     * @return array{0: string, 1: list<int>}|null
     */
    public function acquireAll(array $keys, int $ttlMs, ?string $token, ?int $waitMs = null, ?int $sessionMs = null, bool $shared = false): ?array
    {
        $args = array_merge(['LOCK.ACQUIREALL', (string) count($keys)], $keys, [(string) $ttlMs]);
        if ($token !== null) {
            array_push($args, 'TOKEN', $token);
        }
        if ($shared) {
            $args[] = 'SHARED';
        }
        if ($sessionMs !== null) {
            array_push($args, 'SESSION', (string) $sessionMs);
        }
        if ($waitMs !== null) {
            array_push($args, 'WAIT', (string) $waitMs);
        }
        $reply = $waitMs === null ? $this->call($args) : $this->waiting($args, $waitMs);
        if (!is_array($reply)) {
            return null;
        }
        return [(string) $reply[0], array_map('intval', array_values((array) $reply[1]))];
    }

    /**
     * `LOCK.WATCH key fence timeout-ms`: [fence, value] of the key's holder once it
     * differs from `$fence` ([0, null] when nobody holds it), null when `$timeoutMs`
     * passes first (0: no limit). Blocks the connection meanwhile.
     *
     * @return array{0: int, 1: ?string}|null
     */
    public function watch(string $key, int $fence, int $timeoutMs): ?array
    {
        $reply = $this->waiting(['LOCK.WATCH', $key, (string) $fence, (string) $timeoutMs], $timeoutMs);
        if (!is_array($reply)) {
            return null;
        }
        $value = $reply[1];
        return [(int) $reply[0], $value === null || $value === false ? null : (string) $value];
    }

    public function release(string $key, string $token): bool
    {
        return $this->call(['LOCK.RELEASE', $key, $token]) === 1;
    }

    public function extend(string $key, string $token, int $ttlMs): bool
    {
        return $this->call(['LOCK.EXTEND', $key, $token, (string) $ttlMs]) === 1;
    }

    /**
     * LOCK.INFO as field => integer (ttl, fence, acquired, waiters, ...), null if absent.
     *
     * @return array<string, int|string>|null
     */
    public function info(string $key): ?array
    {
        $reply = $this->call(['LOCK.INFO', $key]);
        if (!is_array($reply)) {
            return null;
        }
        $fields = [];
        for ($i = 0; $i + 1 < count($reply); $i += 2) {
            $value = $reply[$i + 1];
            $fields[(string) $reply[$i]] = is_numeric($value) ? (int) $value : $value;
        }
        return $fields;
    }

    /** A blocking call: the socket's read timeout is raised above the wait for it. */
    private function waiting(array $args, int $waitMs)
    {
        if ($this->redis instanceof RedisCluster) {
            return $this->clusterWaiting($args, $waitMs);
        }
        $previous = $this->redis->getOption(Redis::OPT_READ_TIMEOUT);
        // 0 means "never set": the stream's default, which setting 0 would not restore.
        if ((float) $previous === 0.0) {
            $previous = (float) ini_get('default_socket_timeout');
        }
        $this->redis->setOption(Redis::OPT_READ_TIMEOUT, self::readTimeout($waitMs));
        try {
            return $this->call($args);
        } finally {
            $this->redis->setOption(Redis::OPT_READ_TIMEOUT, $previous);
        }
    }

    private static function readTimeout(int $waitMs): float
    {
        return $waitMs === 0 ? -1.0 : $waitMs / 1000 + 5;
    }

    /**
     * A blocking call on a cluster: on a connection of its own to the node serving the
     * key (found by following `MOVED`/`ASK` from any master), with a read timeout above
     * the wait, so the cluster's shared connections and their timeouts are untouched.
     * A session-bound grant is moved to the cluster's connection before this one closes.
     */
    private function clusterWaiting(array $args, int $waitMs)
    {
        [$host, $port] = $this->redis->_masters()[0];
        $asking = false;
        for ($hops = 0; $hops < 5; $hops++) {
            $node = new Redis();
            $node->connect((string) $host, (int) $port);
            $node->setOption(Redis::OPT_READ_TIMEOUT, self::readTimeout($waitMs));
            try {
                if ($asking) {
                    $node->rawCommand('ASKING');
                }
                $node->clearLastError();
                $reply = $node->rawCommand(...$args);
                $error = $node->getLastError();
            } catch (\RedisException $e) {
                // phpredis throws a redirection rather than answering it as an error.
                [$reply, $error] = [false, $e->getMessage()];
            } finally {
                $node->close();
            }
            if ($reply !== false || $error === null) {
                $session = array_search('SESSION', $args, true);
                if (is_array($reply) && $session !== false) {
                    $wait = array_search('WAIT', $args, true);
                    array_splice($args, (int) $wait, 2);
                    return $this->call($args);
                }
                return $reply;
            }
            if (!preg_match('/^(MOVED|ASK) \d+ (.+):(\d+)$/', $error, $m)) {
                throw new LockException($args[0] . ': ' . $error);
            }
            [$asking, $host, $port] = [$m[1] === 'ASK', $m[2], (int) $m[3]];
        }
        throw new LockException($args[0] . ': too many redirections for ' . $args[1]);
    }

    /** The key a cluster routes `$args` by: the first key (after `numkeys` for LOCK.ACQUIREALL). */
    private static function routeKey(array $args): string
    {
        return (string) ($args[0] === 'LOCK.ACQUIREALL' ? $args[2] : $args[1]);
    }

    /** rawCommand, throwing on an error reply (WRONGTYPE, a bad argument). */
    public function call(array $args)
    {
        $this->redis->clearLastError();
        $reply = $this->redis instanceof RedisCluster
            ? $this->redis->rawCommand(self::routeKey($args), ...$args)
            : $this->redis->rawCommand(...$args);
        $error = $this->redis->getLastError();
        if ($reply === false && $error !== null) {
            $this->redis->clearLastError();
            throw new LockException($args[0] . ': ' . $error);
        }
        return $reply;
    }
}
