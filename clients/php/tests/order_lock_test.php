<?php
/**
 * Checks OrderLock against a server with the module: php tests/order_lock_test.php PORT
 * Prints one line per check and exits non-zero on the first failure.
 */
require __DIR__ . '/../examples/OrderLock.php';
require __DIR__ . '/harness.php';

$port = (int)($argv[1] ?? 0);
if ($port <= 0) {
    fwrite(STDERR, "usage: php tests/order_lock_test.php PORT\n");
    exit(2);
}

$redis = connect($port);
$locks = new OrderLock($redis);

$id = $locks->acquire(42, 10000);
check('acquire returns a 32-character lock id', is_string($id) && strlen($id) === 32);
check('a second acquire of the same order is refused', $locks->acquire(42, 10000) === false);
check('release with another id does not release', $locks->release(42, 'not-the-id') === false);
check('the lock is still there', $locks->info(42) !== null);
check('extend with the id succeeds', $locks->extend(42, $id, 20000));
check('the ttl was extended', $locks->info(42)['ttl'] > 10000);
check('release with the id releases', $locks->release(42, $id));
check('a second release reports the lock is gone', $locks->release(42, $id) === false);
check('info of a free order is null', $locks->info(42) === null);

$first = $locks->acquireWithFence(7, 10000);
$locks->release(7, $first['lock_id']);
$second = $locks->acquireWithFence(7, 10000);
check('fences grow from grant to grant', $second['fence'] > $first['fence']);
$locks->release(7, $second['lock_id']);

// The waiter gets the lock when the holder's lock expires (a short TTL), not at once.
$holder = $locks->acquire(9, 300);
$waiter = new OrderLock(connect($port));
$started = microtime(true);
$waited = $waiter->acquire(9, 10000, 5000);
$elapsed = microtime(true) - $started;
check('a waiting acquire gets the lock once the holder\'s expires', is_string($waited) && $waited !== $holder);
check('and it waited for it', $elapsed >= 0.2);
check('a waiting acquire on a held order times out with false', $locks->acquire(9, 10000, 200) === false);
$waiter->release(9, $waited);

// A worker holding a session-bound lock dies: the lock goes with its connection.
$worker = connect($port);
$workerLocks = new OrderLock($worker);
$workerId = $workerLocks->acquire(11, 600000, null, 0);
$info = $locks->info(11);
check('a session-bound lock shows its grace and open connection', $info['session'] === 0 && $info['connected'] === 1);
$worker->close();
$deadline = microtime(true) + 10;
while ($locks->info(11) !== null && microtime(true) < $deadline) {
    usleep(5000);
}
check('the lock goes at once with the connection, not after its TTL', $locks->info(11) === null);

$cutOff = connect($port);
$grant = (new OrderLock($cutOff))->acquireWithFence(12, 600000, null, 2000, 'worker-12');
$cutOff->close();
$deadline = microtime(true) + 10;
while ($locks->info(12)['connected'] !== 0 && microtime(true) < $deadline) {
    usleep(5000);
}
check('nobody else gets the lock during the grace', $locks->acquire(12, 1000) === false);
$again = $locks->acquireWithFence(12, 600000, null, 2000, 'worker-12');
check('the worker reclaims it with the same fence', $again['fence'] === $grant['fence']);
$locks->release(12, 'worker-12');

$redis->set('order_lock:legacy', 'an old SET NX lock');
$refused = false;
try {
    $locks->acquire('legacy', 1000);
} catch (RuntimeException $e) {
    $refused = strpos($e->getMessage(), 'WRONGTYPE') !== false;
}
check('a string key left by the old helper is refused with WRONGTYPE', $refused);

echo "php: $passed checks passed\n";
