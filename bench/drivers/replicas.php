<?php
// Scenario 14 of the benchmark (bench/src/scenarios/replicas.rs), for the PHP package on
// phpredis: on a master with one replica, free locks acquired one at a time by the
// package with its defaults (replicas 'auto': the server holds the reply until the
// replica has the grant) against a raw LOCK.ACQUIRE ... REPLICAS 1 on the same phpredis
// connection, each released untimed. The two sides take turns in stretches of 100
// acquires, so that both meet the same state of the machine; which goes first turns from
// round to round.
//
// usage: php replicas.php ROOT PORT N ROUNDS  (ROOT: the repository)
// prints, per round and side, one line: "package" or "raw", then each acquire's latency
// in ns.

declare(strict_types=1);

[, $root, $port, $n, $rounds] = $argv;
require $root . '/clients/php/autoload.php';

const TTL_S = 600;
const STRETCH = 100;

function packageOnce(RedisLock\RedisLock $locks, string $name): int
{
    $start = hrtime(true);
    $granted = $locks->lock($name, 0, TTL_S);
    $took = hrtime(true) - $start;
    if (!$granted) {
        throw new RuntimeException("$name: a free lock not granted");
    }
    $locks->unlock($name);
    return $took;
}

function rawOnce(Redis $redis, string $key): int
{
    $start = hrtime(true);
    $granted = $redis->rawCommand('LOCK.ACQUIRE', $key, TTL_S * 1000, 'REPLICAS', 1, 'REPLTIMEOUT', 1000);
    $took = hrtime(true) - $start;
    if (!is_array($granted)) {
        throw new RuntimeException("$key: a free lock not granted");
    }
    $redis->rawCommand('LOCK.RELEASE', $key, $granted[0]);
    return $took;
}

$redis = new Redis();
$redis->connect('127.0.0.1', (int) $port);
$locks = new RedisLock\RedisLock($redis);
$sides = [
    'package' => fn (string $key) => packageOnce($locks, $key),
    'raw' => fn (string $key) => rawOnce($redis, $key),
];
for ($round = 0; $round < (int) $rounds; $round++) {
    $order = $round % 2 === 0 ? $sides : array_reverse($sides, true);
    $latencies = ['package' => [], 'raw' => []];
    for ($start = 0; $start < (int) $n; $start += STRETCH) {
        foreach ($order as $name => $once) {
            for ($i = $start; $i < min($start + STRETCH, (int) $n); $i++) {
                $latencies[$name][] = $once("php:$name:$round:$i");
            }
        }
    }
    foreach (array_keys($sides) as $name) {
        echo $name, ' ', implode(' ', $latencies[$name]), "\n";
    }
}
