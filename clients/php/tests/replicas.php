<?php

// Checks `replicas` (a grant counts once a replica has it) against a master with one
// replica and a master without:   php replicas.php PORT REPLICA_PORT LONE_PORT
// clients/rust/tests/packages/other_languages.rs starts the servers and runs this.

declare(strict_types=1);

require __DIR__ . '/../autoload.php';
require __DIR__ . '/harness.php';

use RedisLock\LockException;
use RedisLock\NotReplicatedException;
use RedisLock\RedisLock;
use RedisLock\Redlock;

[$port, $replicaPort, $lonePort] = [(int) $argv[1], (int) $argv[2], (int) $argv[3]];
$admin = connect($port);
$admin->flushAll();

function calls(Redis $redis, string $command): int
{
    $stats = $redis->info('commandstats');
    preg_match('/calls=(\d+)/', (string) ($stats["cmdstat_$command"] ?? ''), $m);
    return (int) ($m[1] ?? 0);
}

/**
 * The waits for replicas the server ran: the package's WAITs (where the server cannot
 * wait itself), or the replies it held for its replicas (REPLICAS n), each of which asks
 * them with a WAITAOF of the module's own.
 */
function replicaWaits(Redis $redis): int
{
    return calls($redis, 'wait') + calls($redis, 'waitaof');
}

/** Whether the server holds a grant's reply for its replicas itself (Redis 7.2+, Valkey). */
function serverWaits(Redis $redis): bool
{
    $info = $redis->info('server');
    if (isset($info['valkey_version'])) {
        return true;
    }
    return version_compare((string) $info['redis_version'], '7.2.0', '>=');
}

/** Runs `$body` with the replica stopped (SIGSTOP), continued whatever happens. */
function frozen(int $replicaPort, callable $body)
{
    $pid = (int) connect($replicaPort)->info('server')['process_id'];
    posix_kill($pid, SIGSTOP);
    try {
        return $body();
    } finally {
        posix_kill($pid, SIGCONT);
    }
}

function synced(Redis $admin): void
{
    $deadline = microtime(true) + 10;
    while ($admin->rawCommand('WAIT', '1', '100') !== 1) {
        if (microtime(true) > $deadline) {
            check('the replica is in sync', false);
        }
    }
}

synced($admin);
$lock = new RedisLock(connect($port), 'r:');
check('a grant on a master with a replica is granted', $lock->lock('a', 0, 10));
$lock->unlock('a');
[$waits, $own, $roles] = [replicaWaits($admin), calls($admin, 'wait'), calls($admin, 'role')];
for ($i = 0; $i < 3; $i++) {
    $lock->lock('a', 0, 10);
    $lock->expire('a', 10);
    $lock->unlock('a');
}
check('each grant and extend waited for the replica', replicaWaits($admin) - $waits === 6);
check('... with no WAIT of its own where the server waits', calls($admin, 'wait') - $own === (serverWaits($admin) ? 0 : 6));
check('the master was learned once, not per grant', calls($admin, 'role') === $roles);

$short = new RedisLock(connect($port), 'r:', null, 'auto', 0.1);
$short->lock('b', 0, 10);
$short->unlock('b');
frozen($replicaPort, function () use ($short, $admin) {
    try {
        $short->lock('b', 0, 10);
        check('a grant no replica acknowledged is not granted', false);
    } catch (NotReplicatedException $e) {
        check('a grant no replica acknowledged throws NotReplicatedException (0 of 1)',
            $e->acked === 0 && $e->required === 1 && !$e->refused && strpos($e->getMessage(), '0 of 1 replicas') !== false);
    }
    check('... and was released at once', $admin->exists('r:b') === 0);
    check('... and is not held', $short->fence('b') === null);
    $started = microtime(true);
    try {
        $short->lock('b', 0.4, 10);
    } catch (NotReplicatedException $e) {
        check('with a wait, it is tried again until the wait ends', microtime(true) - $started >= 0.35);
    }
    try {
        $short->lockAll(['{t}x', '{t}y'], 0, 10);
        check('lockAll not replicated', false);
    } catch (NotReplicatedException $e) {
        check('lockAll too: not replicated, and released', $admin->exists('r:{t}x', 'r:{t}y') === 0);
    }
});
synced($admin);
check('with the replica back, the lock is granted', $short->lock('b', 5, 10));
frozen($replicaPort, function () use ($short, $admin) {
    try {
        $short->expire('b', 20);
        check('an extend not replicated throws', false);
    } catch (NotReplicatedException $e) {
        check('an extend not replicated throws, and the lock stays held', $admin->exists('r:b') === 1);
    }
});
$short->unlock('b');

$waits = replicaWaits($admin);
$off = new RedisLock(connect($port), 'r:', null, 0);
check('replicas 0 grants', $off->lock('c', 0, 10) && $off->expire('c', 10) && $off->unlock('c'));
check('... without a WAIT', replicaWaits($admin) === $waits);
try {
    (new RedisLock(connect($port), 'r:', null, 2, 0.2))->lock('c', 0, 10);
    check('more replicas than the master has are not replicated', false);
} catch (NotReplicatedException $e) {
    // Where the server waits it holds the grant for two and undoes it with one; where the
    // package counts the replicas itself (Redis 7.0), it refuses before sending.
    check('more replicas than the master has are not replicated, and nothing is held',
        $e->refused === !serverWaits($admin) && $admin->exists('r:c') === 0);
}
check('a bad replicas setting is refused', throws(function () use ($port) {
    new RedisLock(connect($port), 'r:', null, -1);
}) && throws(function () use ($port) {
    new RedisLock(connect($port), 'r:', null, 'auto', 0.0);
}));

$lone = connect($lonePort);
$before = replicaWaits($lone);
$alone = new RedisLock(connect($lonePort), 'r:');
check('a master without replicas grants', $alone->lock('d', 0, 10) && $alone->unlock('d'));
check('... without a WAIT', replicaWaits($lone) === $before);
$redlock = new Redlock([connect($lonePort)]);
$held = $redlock->lock('e', 10000);
check('Redlock on a master without replicas grants without a WAIT', is_array($held) && replicaWaits($lone) === $before);
$redlock->unlock($held);

// fsync: WAITAOF 1 n, where the server has it (Redis 7.2+, Valkey 8+), else refused
$admin->clearLastError();
$hasWaitaof = $admin->rawCommand('WAITAOF', '0', '0', '0') !== false;
$fsync = new RedisLock(connect($port), 'r:', null, 'auto', null, true);
if (!$hasWaitaof) {
    try {
        $fsync->lock('f', 0, 10);
        check('fsync without WAITAOF is refused', false);
    } catch (NotReplicatedException $e) {
        check('fsync without WAITAOF is refused, and released',
            $e->refused && strpos($e->getMessage(), 'WAITAOF') !== false && $admin->exists('r:f') === 0);
    }
} else {
    $replica = connect($replicaPort);
    foreach ([$admin, $replica] as $server) {
        $server->config('SET', 'appendonly', 'yes');
        $server->config('SET', 'appendfsync', 'always');
    }
    $deadline = microtime(true) + 20;
    $streak = 0;
    while ($streak < 3) {
        $admin->set('r:warm', '1');
        $streak = $admin->rawCommand('WAITAOF', '1', '1', '100') === [1, 1] ? $streak + 1 : 0;
        if (microtime(true) > $deadline) {
            check('both AOFs fsyncing', false);
        }
    }
    $before = calls($admin, 'waitaof');
    // The package's WAITAOF, and the module's own with which the held reply asks the
    // replica to acknowledge.
    check('fsync waits with WAITAOF and grants', $fsync->lock('f', 0, 10) && calls($admin, 'waitaof') - $before === 2);
    $fsync->unlock('f');
    foreach ([$admin, $replica] as $server) {
        $server->config('SET', 'appendfsync', 'everysec');
        $server->config('SET', 'appendonly', 'no');
    }
}

function throws(callable $call): bool
{
    try {
        $call();
    } catch (LockException $e) {
        return true;
    }
    return false;
}

echo "$passed checks passed\n";
