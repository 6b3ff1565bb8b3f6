<?php

// One of several workers popping the same RedisQueue until it is empty; prints the ids
// it took, one per line.   php pop_worker.php PORT QUEUE

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

$redis = new Redis();
$redis->connect('127.0.0.1', (int) $argv[1]);
$queue = new RedisLock\RedisQueue($redis, null, 30.0);
while (($ids = $queue->pop($argv[2], 3)) !== []) {
    echo implode("\n", $ids), "\n";
}
