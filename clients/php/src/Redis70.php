<?php

declare(strict_types=1);

namespace RedisLock;

/**
 * Where the server cannot hold a grant's reply for its replicas (Redis 7.0, which refuses
 * `REPLICAS AUTO`; or a module before 0.3.0, which knows no `REPLICAS`): the package
 * learns its masters' replicas itself and sends its own `WAIT n timeout` on the same
 * connection, pipelined in the same round trip (on a RedisCluster, which has no pipelines
 * in phpredis, right after it on the key's node connection); a grant too few replicas
 * acknowledged in time is released at once by its token. Entered only from Commands,
 * after such a refusal.
 *
 * 'auto' asks for 1 when the master has a replica online and for nothing on a master
 * without one. What the connection learned of its master (`ROLE`, or `WAIT 0 0` for a
 * user whose ACL denies `ROLE`) is forgotten after an error or a shortfall and after
 * RELEARN_SECONDS; a master that lists fewer replicas than before is taken at its former
 * count for HOLD_SECONDS (a deposed master loses its replicas just before it is demoted):
 * the rule the server's own auto keeps where it can wait. An explicit number asks for that
 * many; a master with fewer online refuses at once.
 */
final class Redis70
{
    public const RELEARN_SECONDS = 5.0;
    public const HOLD_SECONDS = 15.0;

    /** @var array<string, array{0: int, 1: float}> what each key's master was seen with: [online, when] */
    private $learned = [];
    /** @var array<string, array{0: int, 1: ?float, 2: int}> address => [most replicas seen, fewer since, last seen] */
    private static $seen = [];

    /**
     * `$commands` with the WAIT they need, in one round trip through `$exchange` (which
     * sends a list of commands and returns their replies): [the writes' replies,
     * acknowledgements required, the shortfall or null (Replicas::shortfall)].
     *
     * @param callable(list<list<string>>): list<mixed> $exchange
     * @param list<list<string>> $commands
     * @return array{0: list<mixed>, 1: int, 2: array{0: int, 1: bool, 2: string}|null}
     */
    public function replicated(callable $exchange, string $place, string $address, string $key, array $commands, Replicas $replicas, int $ttlMs): array
    {
        $required = $replicas->asksNoReplica() ? 0 : $replicas->required($this->online($exchange, $place, $address), $key);
        $waits = $replicas->off() ? [] : $replicas->waitCommands($required, $ttlMs);
        $replies = $exchange(array_merge($commands, $waits));
        $short = $waits === [] ? null : $replicas->shortfall($required, $replies[count($commands)] ?? null);
        if ($short !== null) {
            $this->forget($place);
        }
        return [array_slice($replies, 0, count($commands)), $required, $short];
    }

    /**
     * The replicas `$place`'s master has online, learned now with `ROLE` if not known.
     *
     * @param callable(list<list<string>>): list<mixed> $exchange
     */
    private function online(callable $exchange, string $place, string $address): int
    {
        $known = $this->known($place);
        if ($known !== null) {
            return $known;
        }
        $reply = $exchange([['ROLE']])[0];
        if ($reply instanceof LockException && strpos($reply->getMessage(), 'NOPERM') !== false) {
            $reply = $exchange([['WAIT', '0', '0']])[0];
        }
        if ($reply instanceof LockException) {
            throw $reply;
        }
        return $this->learn($place, $address, self::onlineFrom($reply));
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

    /** The replicas online in a `ROLE` reply (a master lists them), or a `WAIT 0 0` answer. */
    public static function onlineFrom($reply): int
    {
        if (is_int($reply)) {
            return $reply;
        }
        return is_array($reply) && ($reply[0] ?? null) === 'master' && is_array($reply[2] ?? null) ? count($reply[2]) : 0;
    }
}
