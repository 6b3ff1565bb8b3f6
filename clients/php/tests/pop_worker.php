<?php

// One of several workers popping the same RedisQueue until it is empty; prints the ids
// it took, one per line.   php pop_worker.php PORT QUEUE

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

$queue = new RedisLock\RedisQueue(['host' => '127.0.0.1', 'port' => (int) $argv[1]]);
while (($tasks = $queue->pop($argv[2], 3, 30)) !== []) {
    echo implode("\n", array_column($tasks, 'id')), "\n";
}
