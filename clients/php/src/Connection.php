<?php

declare(strict_types=1);

namespace RedisLock;

use Redis;
use RedisCluster;

/**
 * The connection a RedisLock or RedisQueue works on: a connected `Redis` or
 * `RedisCluster` as given, or one made from the PHP articles' `$param` config array:
 *
 *   ['host' => '127.0.0.1', 'port' => 6379, 'timeout' => 1.5, 'read_timeout' => 3,
 *    'auth' => 'secret', 'index' => 2, 'prefix' => 'app:']
 *
 * (`password` for `auth`, `db` or `database` for `index`); for a cluster
 * `['cluster' => ['127.0.0.1:7000', ...], 'timeout' => ..., 'read_timeout' => ...,
 * 'auth' => ...]`; for the master Sentinel names, `['sentinel' => ['127.0.0.1:26379',
 * ...], 'service' => 'mymaster', ...]` and the other fields as for one server (the
 * first Sentinel that answers gives the master's address). Nothing given:
 * 127.0.0.1:6379.
 */
final class Connection
{
    /**
     * @param Redis|RedisCluster|array<string, mixed>|null $param
     * @return Redis|RedisCluster
     */
    public static function open($param)
    {
        if ($param instanceof Redis || $param instanceof RedisCluster) {
            return $param;
        }
        if ($param !== null && !is_array($param)) {
            throw new LockException('expected a connected Redis or RedisCluster, or a config array, not ' . gettype($param));
        }
        $config = $param ?? [];
        $timeout = (float) ($config['timeout'] ?? 0.0);
        $readTimeout = (float) ($config['read_timeout'] ?? 0.0);
        $auth = $config['auth'] ?? $config['password'] ?? null;
        if (isset($config['cluster'])) {
            $cluster = new RedisCluster(null, (array) $config['cluster'], $timeout, $readTimeout, false, $auth);
            self::prefix($cluster, $config);
            return $cluster;
        }
        if (isset($config['sentinel'])) {
            [$config['host'], $config['port']] = self::masterFromSentinels($config, $timeout);
        }
        $redis = new Redis();
        $host = (string) ($config['host'] ?? '127.0.0.1');
        $port = (int) ($config['port'] ?? 6379);
        try {
            $connected = $redis->connect($host, $port, $timeout);
        } catch (\RedisException $e) {
            $connected = false;
        }
        if (!$connected) {
            throw new LockException("cannot connect to $host:$port");
        }
        if ($auth !== null && !$redis->auth($auth)) {
            throw new LockException("$host:$port refused the password");
        }
        $db = $config['index'] ?? $config['db'] ?? $config['database'] ?? null;
        if ($db !== null && !$redis->select((int) $db)) {
            throw new LockException("$host:$port refused database $db");
        }
        if ($readTimeout > 0) {
            $redis->setOption(Redis::OPT_READ_TIMEOUT, $readTimeout);
        }
        self::prefix($redis, $config);
        return $redis;
    }

    /**
     * The address of the master the configured Sentinels name for `service`.
     *
     * @param array<string, mixed> $config
     * @return array{0: string, 1: int}
     */
    private static function masterFromSentinels(array $config, float $timeout): array
    {
        $service = (string) ($config['service'] ?? 'mymaster');
        foreach ((array) $config['sentinel'] as $address) {
            [$host, $port] = explode(':', (string) $address, 2) + [1 => '26379'];
            try {
                $master = (new \RedisSentinel($host, (int) $port, $timeout))->getMasterAddrByName($service);
            } catch (\RedisException $e) {
                continue;
            }
            if (is_array($master) && count($master) === 2) {
                return [(string) $master[0], (int) $master[1]];
            }
        }
        throw new LockException("no Sentinel named a master for $service");
    }

    /**
     * @param Redis|RedisCluster $redis
     * @param array<string, mixed> $config
     */
    private static function prefix($redis, array $config): void
    {
        if (isset($config['prefix'])) {
            $redis->setOption(Redis::OPT_PREFIX, (string) $config['prefix']);
        }
    }
}
