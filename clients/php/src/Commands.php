<?php

declare(strict_types=1);

namespace RedisLock;

use Redis;

/**
 * The module's commands through phpredis `rawCommand`, with errors told apart from nil
 * replies (phpredis answers `false` for both) and waits given a read timeout longer
 * than themselves.
 */
final class Commands
{
    /** @var Redis */
    private $redis;

    public function __construct(Redis $redis)
    {
        $this->redis = $redis;
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
    public function acquire(string $key, int $ttlMs, ?string $token, ?int $waitMs = null, ?int $sessionMs = null, array $mode = []): ?array
    {
        $args = array_merge(['LOCK.ACQUIRE', $key, (string) $ttlMs], $mode);
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
        $previous = $this->redis->getOption(Redis::OPT_READ_TIMEOUT);
        // 0 means "never set": the stream's default, which setting 0 would not restore.
        if ((float) $previous === 0.0) {
            $previous = (float) ini_get('default_socket_timeout');
        }
        $this->redis->setOption(Redis::OPT_READ_TIMEOUT, $waitMs === 0 ? -1 : $waitMs / 1000 + 5);
        try {
            return $this->call($args);
        } finally {
            $this->redis->setOption(Redis::OPT_READ_TIMEOUT, $previous);
        }
    }

    /** rawCommand, throwing on an error reply (WRONGTYPE, a bad argument). */
    public function call(array $args)
    {
        $this->redis->clearLastError();
        $reply = $this->redis->rawCommand(...$args);
        $error = $this->redis->getLastError();
        if ($reply === false && $error !== null) {
            $this->redis->clearLastError();
            throw new LockException($args[0] . ': ' . $error);
        }
        return $reply;
    }
}
