<?php
// Scenario 14 of the benchmark (bench/src/scenarios/replicas.rs), for the PHP package on
// phpredis: on a master with one replica, free locks acquired one at a time by the
// package with its defaults (replicas 'auto': the server holds the reply until the
// replica has the grant) against a raw LOCK.ACQUIRE ... REPLICAS 1 on the same phpredis
// connection, each released untimed. Sides alternate which goes first from round to
// round.
//
// usage: php replicas.php ROOT PORT N ROUNDS  (ROOT: the repository)
// prints, per round and side, one line: "package" or "raw", then each acquire's latency
// in ns.

declare(strict_types=1);

[, $root, $port, $n, $rounds] = $argv;
require $root . '/clients/php/autoload.php';

const TTL_S = 600;

function packageSide(RedisLock\RedisLock $locks, string $tag, int $n): array
{
    $latencies = [];
    for ($i = 0; $i < $n; $i++) {
        $name = "php:$tag:$i";
        $start = hrtime(true);
        $granted = $locks->lock($name, 0, TTL_S);
        $latencies[] = hrtime(true) - $start;
        if (!$granted) {
            throw new RuntimeException("$name: a free lock not granted");
        }
        $locks->unlock($name);
    }
    return $latencies;
}

function rawSide(Redis $redis, string $tag, int $n): array
{
    $latencies = [];
    for ($i = 0; $i < $n; $i++) {
        $key = "php-raw:$tag:$i";
        $start = hrtime(true);
        $granted = $redis->rawCommand('LOCK.ACQUIRE', $key, TTL_S * 1000, 'REPLICAS', 1, 'REPLTIMEOUT', 1000);
        $latencies[] = hrtime(true) - $start;
        if (!is_array($granted)) {
            throw new RuntimeException("$key: a free lock not granted");
        }
        $redis->rawCommand('LOCK.RELEASE', $key, $granted[0]);
    }
    return $latencies;
}

$redis = new Redis();
$redis->connect('127.0.0.1', (int) $port);
$locks = new RedisLock\RedisLock($redis);
$sides = [
    'package' => fn (string $tag) => packageSide($locks, $tag, (int) $n),
    'raw' => fn (string $tag) => rawSide($redis, $tag, (int) $n),
];
for ($round = 0; $round < (int) $rounds; $round++) {
    $order = $round % 2 === 0 ? $sides : array_reverse($sides, true);
    foreach ($order as $name => $run) {
        echo $name, ' ', implode(' ', $run("$name:$round")), "\n";
    }
}
