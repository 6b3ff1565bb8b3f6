<?php

declare(strict_types=1);

namespace RedisLock;

use Redis;
use RedisCluster;
use RedisException;

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

    /** @var array<string, bool> servers (by address) that refused `REPLICAS`: their grants wait with WAIT */
    private static $noServerWait = [];

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
    public function acquire(string $key, int $ttlMs, ?string $token, ?int $waitMs = null, ?int $sessionMs = null, array $mode = [], ?string $value = null, ?Replicas $replicas = null): ?array
    {
        $args = $mode === [] ? ['LOCK.ACQUIRE', $key, (string) $ttlMs] : array_merge(['LOCK.ACQUIRE', $key, (string) $ttlMs], $mode);
        if ($value !== null) {
            array_push($args, 'VALUE', $value);
        }
        if ($token !== null) {
            array_push($args, 'TOKEN', $token);
        }
        if ($sessionMs !== null) {
            array_push($args, 'SESSION', (string) $sessionMs);
        }
        $reply = $this->grant($args, $key, $ttlMs, $waitMs, $replicas, [['LOCK.RELEASE', $key, (string) $token]]);
        if (!is_array($reply)) {
            return null;
        }
        return [(string) $reply[0], (int) $reply[1]];
    }

    /**
     * `acquire` of the common lock in the fewest steps (what the package adds to the
     * server's wait is the client's time before and after it, and on a loaded or virtual
     * machine every microsecond before the command goes out can cost more): no wait, no
     * session, mode or value, a write the server holds for its replicas without fsync, on
     * a plain connection; `plain($replicas)` says whether it applies. [token, fence], or
     * null when busy; an error reply means what it means to `acquire`.
     *
     * @return array{0: string, 1: int}|null
     */
    public function acquirePlain(string $key, int $ttlMs, string $token, Replicas $replicas): ?array
    {
        $write = $replicas->serverWrite(['LOCK.ACQUIRE', $key, (string) $ttlMs, 'TOKEN', $token], $ttlMs);
        try {
            [$reply] = $this->exchange($this->redis, $key, [$write]);
        } catch (RedisException $e) {
            $reply = self::notReplicatedReply($e, 'LOCK.ACQUIRE');
        }
        if (is_array($reply)) {
            return [(string) $reply[0], (int) $reply[1]];
        }
        if (!$reply instanceof LockException) {
            return null;
        }
        if (!self::refusesReplicas($reply)) {
            throw self::fromServer($key, $reply);
        }
        // The server cannot wait (Redis 7.0) and changed nothing: from now on the
        // package waits itself.
        self::$noServerWait[$this->server()] = true;
        return $this->acquire($key, $ttlMs, $token, null, null, [], null, $replicas);
    }

    /** Whether `acquirePlain` applies to a lock with `$replicas`. */
    public function plain(Replicas $replicas): bool
    {
        return self::$noServerWait === [] && !$replicas->fsync() && $this->redis instanceof Redis;
    }

    /**
     * `LOCK.ACQUIREALL numkeys key [key ...] ttl-ms [TOKEN token] [WAIT ms] [SESSION ms]
     * [SHARED]`: [token, [fence, ...]] when every key is granted at once, null when one
     * is busy (after `$waitMs`, if given; 0 waits without limit).
     *
     * @param list<string> $keys
     * @return array{0: string, 1: list<int>}|null
     */
    public function acquireAll(array $keys, int $ttlMs, ?string $token, ?int $waitMs = null, ?int $sessionMs = null, bool $shared = false, ?Replicas $replicas = null): ?array
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
        $releases = array_map(function (string $key) use ($token): array {
            return ['LOCK.RELEASE', $key, (string) $token];
        }, $keys);
        $reply = $this->grant($args, $keys[0], $ttlMs, $waitMs, $replicas, $releases);
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

    /**
     * LOCK.EXTEND, with the WAIT `$replicas` asks (NotReplicatedException when extended
     * but too few replicas acknowledged it: the lock stays held).
     */
    public function extend(string $key, string $token, int $ttlMs, ?Replicas $replicas = null): bool
    {
        $args = ['LOCK.EXTEND', $key, $token, (string) $ttlMs];
        if ($replicas === null) {
            return $this->call($args) === 1;
        }
        [$replies, $required, $short] = $this->replicated($this->redis, $key, [$args], $replicas, $ttlMs);
        if ($replies[0] instanceof LockException) {
            throw $replies[0];
        }
        if ($replies[0] === 1 && $short !== null) {
            throw new NotReplicatedException("$key: the lock was extended, but " . $short[2], $short[0], $required, $short[1]);
        }
        return $replies[0] === 1;
    }

    /**
     * An acquire's reply: sent (with `WAIT ms` when `$waitMs` is given, on a connection
     * whose read timeout outlasts it) with the WAIT `$replicas` asks; a grant too few
     * replicas acknowledged is given back by `$releases` at once, and
     * NotReplicatedException thrown.
     *
     * @param list<string> $args
     * @param list<list<string>> $releases
     * @return mixed
     */
    private function grant(array $args, string $key, int $ttlMs, ?int $waitMs, ?Replicas $replicas, array $releases)
    {
        if ($waitMs === null) {
            return $this->grantOn($this->redis, $args, $key, $ttlMs, $replicas, $releases);
        }
        array_push($args, 'WAIT', (string) $waitMs);
        return $this->waiting($args, $waitMs, function ($connection, array $args) use ($key, $ttlMs, $replicas, $releases) {
            return $this->grantOn($connection, $args, $key, $ttlMs, $replicas, $releases);
        });
    }

    /**
     * `grant` on `$connection`: the reply, or NotReplicatedException after `$releases`
     * gave back a grant too few replicas acknowledged.
     *
     * @param Redis|RedisCluster $connection
     * @param list<string> $args
     * @param list<list<string>> $releases
     * @return mixed
     */
    private function grantOn($connection, array $args, string $key, int $ttlMs, ?Replicas $replicas, array $releases)
    {
        if ($replicas === null) {
            $reply = $this->exchange($connection, $key, [$args])[0];
            if ($reply instanceof LockException) {
                throw $reply;
            }
            return $reply;
        }
        [$replies, $required, $short] = $this->replicated($connection, $key, [$args], $replicas, $ttlMs);
        if ($replies[0] instanceof LockException) {
            throw $replies[0];
        }
        if (!is_array($replies[0]) || $short === null) {
            return $replies[0];
        }
        $this->exchange($connection, $key, $releases);
        throw new NotReplicatedException("$key: the lock was granted, but " . $short[2], $short[0], $required, $short[1]);
    }

    /**
     * `$commands` (writes that make or keep a grant) and the WAIT they need, in one round
     * trip on `$connection`: [their replies, acknowledgements required, the shortfall or
     * null (Replicas::shortfall)].
     *
     * @param Redis|RedisCluster $connection
     * @param list<list<string>> $commands
     * @return array{0: list<mixed>, 1: int, 2: array{0: int, 1: bool, 2: string}|null}
     */
    private function replicated($connection, string $key, array $commands, Replicas $replicas, int $ttlMs): array
    {
        $server = self::$noServerWait === [] ? null : $this->server();
        if ($server === null || !isset(self::$noServerWait[$server])) {
            $writes = $replicas->serverWrites($commands, $ttlMs);
            try {
                $replies = $this->exchange($connection, $key, $writes);
            } catch (RedisException $e) {
                // Each command here is sent on its own: only one can have thrown it.
                if (count($commands) !== 1) {
                    throw $e;
                }
                $replies = [self::notReplicatedReply($e, $commands[0][0])];
            }
            $fsync = $replicas->fsync();
            $own = $fsync ? array_slice($replies, 0, count($commands)) : $replies;
            $refused = false;
            foreach ($own as $i => $reply) {
                if ($reply instanceof LockException) {
                    $refused = $refused || self::refusesReplicas($reply);
                    $own[$i] = self::fromServer($key, $reply);
                }
            }
            if (!$refused) {
                return [$own, 0, $fsync ? $replicas->shortfall(0, $replies[count($commands)] ?? null) : null];
            }
            $server = $this->server();
            self::$noServerWait[$server] = true;
        }
        // The server cannot wait for its replicas (Redis 7.0): the package waits itself.
        $place = $this->redis instanceof RedisCluster ? $key : '';
        $address = $this->redis instanceof RedisCluster ? "cluster:$key" : $server;
        return $replicas->redis70()->replicated(function (array $cmds) use ($connection, $key) {
            return $this->exchange($connection, $key, $cmds);
        }, $place, $address, $key, $commands, $replicas, $ttlMs);
    }

    /** The server the writes go to, as far as what is learned of it goes: its address. */
    private function server(): string
    {
        return $this->redis instanceof RedisCluster ? 'cluster' : $this->redis->getHost() . ':' . $this->redis->getPort();
    }

    /**
     * Whether a server's error reply refused `REPLICAS` (it cannot wait: Redis 7.0; or an
     * older module does not know it), which changed nothing: the writes go again with
     * WAIT.
     */
    private static function refusesReplicas(LockException $reply): bool
    {
        return preg_match("/REPLICAS needs|unknown option 'REPLICAS'/", $reply->getMessage()) === 1;
    }

    /**
     * `$e`, thrown by phpredis for `$command`, as the error reply it was: phpredis throws
     * an error reply of a code it does not know (NOTREPLICATED) instead of handing it
     * back. Anything else is thrown again.
     */
    private static function notReplicatedReply(RedisException $e, string $command): LockException
    {
        if (strpos($e->getMessage(), 'NOTREPLICATED') === false) {
            throw $e;
        }
        return new LockException($command . ': ' . $e->getMessage());
    }

    /**
     * The server's `NOTREPLICATED acked <a> required <n>` (it undid the grant; an extend
     * keeps the lock) as NotReplicatedException, else `$reply`.
     *
     * @param mixed $reply
     * @return mixed
     */
    private static function fromServer(string $key, $reply)
    {
        if (!$reply instanceof LockException
            || !preg_match('/NOTREPLICATED acked (\d+) required (\d+)/', $reply->getMessage(), $found)) {
            return $reply;
        }
        [$acked, $required] = [(int) $found[1], (int) $found[2]];
        return new NotReplicatedException(
            "$key: only $acked of $required replicas acknowledged it in time (the server undid the grant; an extend keeps the lock)",
            $acked,
            $required,
            false
        );
    }

    /**
     * `$commands` on `$connection` in one round trip (a pipeline; on a RedisCluster, which
     * has none in phpredis, one after another on `$key`'s node); an error reply as its
     * LockException.
     *
     * @param Redis|RedisCluster $connection
     * @param list<list<string>> $commands
     * @return list<mixed>
     */
    private function exchange($connection, string $key, array $commands): array
    {
        if ($connection instanceof RedisCluster) {
            $replies = [];
            foreach ($commands as $command) {
                try {
                    $replies[] = $this->call($command, $key);
                } catch (LockException $e) {
                    $replies[] = $e;
                }
            }
            return $replies;
        }
        $connection->clearLastError();
        if (count($commands) === 1) {
            // One command needs no pipeline: phpredis's costs a grant more than the
            // command's own round trip on loopback.
            $reply = $connection->rawCommand(...$commands[0]);
            if ($reply !== false || ($error = $connection->getLastError()) === null) {
                return [$reply];
            }
            $connection->clearLastError();
            return [new LockException($commands[0][0] . ': ' . $error)];
        } else {
            $pipeline = $connection->multi(Redis::PIPELINE);
            foreach ($commands as $command) {
                $pipeline->rawCommand(...$command);
            }
            $replies = $pipeline->exec();
        }
        $error = $connection->getLastError();
        $connection->clearLastError();
        return array_map(function ($reply, array $command) use ($error) {
            return $reply === false && $error !== null ? new LockException($command[0] . ': ' . $error) : $reply;
        }, array_values((array) $replies), $commands);
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

    /**
     * A blocking call: the socket's read timeout is raised above the wait for it.
     * `$send($connection, $args)` sends it (by default, `rawCommand`).
     */
    private function waiting(array $args, int $waitMs, ?callable $send = null)
    {
        $send = $send ?? function ($connection, array $args) {
            $reply = $this->exchange($connection, (string) $args[1], [$args])[0];
            if ($reply instanceof LockException) {
                throw $reply;
            }
            return $reply;
        };
        if ($this->redis instanceof RedisCluster) {
            return $this->clusterWaiting($args, $waitMs, $send);
        }
        $previous = $this->redis->getOption(Redis::OPT_READ_TIMEOUT);
        // 0 means "never set": the stream's default, which setting 0 would not restore.
        if ((float) $previous === 0.0) {
            $previous = (float) ini_get('default_socket_timeout');
        }
        $this->redis->setOption(Redis::OPT_READ_TIMEOUT, self::readTimeout($waitMs));
        try {
            return $send($this->redis, $args);
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
    private function clusterWaiting(array $args, int $waitMs, callable $send)
    {
        [$host, $port] = $this->redis->_masters()[0];
        $asking = false;
        for ($hops = 0; $hops < 5; $hops++) {
            $node = new Redis();
            $node->connect((string) $host, (int) $port);
            $node->setOption(Redis::OPT_READ_TIMEOUT, self::readTimeout($waitMs));
            $session = array_search('SESSION', $args, true);
            try {
                if ($asking) {
                    $node->rawCommand('ASKING');
                }
                // A session-bound grant is waited for where it is bound, below.
                $reply = $session === false ? $send($node, $args) : $this->exchange($node, self::routeKey($args), [$args])[0];
                $error = $reply instanceof LockException ? $reply->getMessage() : null;
            } catch (NotReplicatedException $e) {
                throw $e;
            } catch (LockException | \RedisException $e) {
                // phpredis throws a redirection rather than answering it as an error.
                [$reply, $error] = [false, $e->getMessage()];
            } finally {
                $node->close();
            }
            if ($error === null) {
                if (is_array($reply) && $session !== false) {
                    $wait = array_search('WAIT', $args, true);
                    array_splice($args, (int) $wait, 2);
                    return $send($this->redis, $args);
                }
                return $reply;
            }
            if (!preg_match('/(MOVED|ASK) \d+ (.+):(\d+)$/', $error, $m)) {
                throw new LockException($args[0] . ': ' . preg_replace('/^[A-Z.]+: /', '', $error));
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

    /**
     * rawCommand, throwing on an error reply (WRONGTYPE, a bad argument); on a cluster
     * routed by `$route` (default: the command's key).
     */
    public function call(array $args, ?string $route = null)
    {
        $this->redis->clearLastError();
        $reply = $this->redis instanceof RedisCluster
            ? $this->redis->rawCommand($route ?? self::routeKey($args), ...$args)
            : $this->redis->rawCommand(...$args);
        $error = $this->redis->getLastError();
        if ($reply === false && $error !== null) {
            $this->redis->clearLastError();
            throw new LockException($args[0] . ': ' . $error);
        }
        return $reply;
    }
}
