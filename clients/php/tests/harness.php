<?php
/**
 * What the PHP check scripts share: a connection to the test server, and check(), which
 * prints one line per check and exits non-zero on the first failure; $passed counts them.
 */

$passed = 0;

function check(string $name, bool $ok): void
{
    global $passed;
    if (!$ok) {
        fwrite(STDERR, "FAILED: $name\n");
        exit(1);
    }
    $passed++;
    echo "ok - $name\n";
}

function connect(int $port): Redis
{
    $redis = new Redis();
    $redis->connect('127.0.0.1', $port, 5.0);
    return $redis;
}
