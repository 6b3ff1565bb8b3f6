<?php

// Checks RedisLock, RedisQueue and the flash-sale example against a server with the
// module:   php run.php PORT
// Prints one line per check; exits non-zero on the first failure.
// client/tests/other_languages.rs starts the server and runs this.

declare(strict_types=1);

require __DIR__ . '/../autoload.php';
require __DIR__ . '/harness.php';

use RedisLock\LockException;
use RedisLock\RedisLock;
use RedisLock\RedisQueue;

$port = (int) ($argv[1] ?? 0);

function throws(callable $call, string $contains): bool
{
    try {
        $call();
    } catch (LockException $e) {
        return strpos($e->getMessage(), $contains) !== false;
    }
    return false;
}

function acquireCalls(Redis $redis): int
{
    $stats = $redis->info('commandstats');
    preg_match('/calls=(\d+)/', (string) ($stats['cmdstat_lock.acquire'] ?? ''), $m);
    return (int) ($m[1] ?? 0);
}

/** Runs `php $args...` processes at once; returns their outputs, in start order. */
function runAll(array $commands): array
{
    $procs = [];
    foreach ($commands as $args) {
        $pipes = [];
        $procs[] = [proc_open(array_merge([PHP_BINARY], $args), [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes), $pipes];
    }
    $outputs = [];
    foreach ($procs as [$proc, $pipes]) {
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        $status = proc_close($proc);
        if ($status !== 0) {
            fwrite(STDERR, "a child failed ($status): $out $err\n");
            exit(1);
        }
        $outputs[] = $out;
    }
    return $outputs;
}

$r = connect($port);
$r->flushAll();

// --- RedisLock -------------------------------------------------------------------------

$a = new RedisLock(connect($port));
$b = new RedisLock(connect($port));
check('lock takes a free lock', $a->lock('order:1'));
check('it is a lock of the module, with a fence', $r->type('Lock:order:1') !== Redis::REDIS_STRING && $a->fence('order:1') > 0);
check('the default expire is 15 s', $r->pTtl('Lock:order:1') > 14000 && $r->pTtl('Lock:order:1') <= 15000);
check('isLocking is true for the holder', $a->isLocking('order:1'));
check('and false for another object', !$b->isLocking('order:1'));
check('another object cannot take it without waiting', !$b->lock('order:1'));
check('unlock by another object does nothing', !$b->unlock('order:1') && $r->exists('Lock:order:1') === 1);
$fence = $a->fence('order:1');
check('locking again renews it with the same fence', $a->lock('order:1', 0, 30) && $a->fence('order:1') === $fence && $r->pTtl('Lock:order:1') > 15000);
check('unlock releases it', $a->unlock('order:1') && $r->exists('Lock:order:1') === 0);
check('a second unlock answers false', !$a->unlock('order:1'));

$a->lock('order:2', 0, 0.3);
$r->rawCommand('CONFIG', 'RESETSTAT');
$started = microtime(true);
$took = $b->lock('order:2', 5, 15, 1);
$elapsed = microtime(true) - $started;
check('a waiting lock is granted when the holder\'s lock expires', $took && $elapsed >= 0.2 && $elapsed < 4);
check('it waited in the server: one LOCK.ACQUIRE, whatever $waitIntervalUs', acquireCalls($r) === 1);
check('the old holder no longer isLocking', !$a->isLocking('order:2') && $b->isLocking('order:2'));
check('the new grant has a greater fence', $b->fence('order:2') > $a->fence('order:2'));

$started = microtime(true);
check('a wait that times out answers false', !$a->lock('order:2', 0.2));
check('after the timeout', microtime(true) - $started >= 0.2);
check('and the failed object holds nothing', $a->fence('order:2') === null && !$a->unlock('order:2'));

check('expire sets what is left', $b->expire('order:2', 30) && $r->pTtl('Lock:order:2') > 25000);
check('expire of a lock not held answers false', !$a->expire('order:2', 30));
$b->unlock('order:2');
check('expire after unlock answers false', !$b->expire('order:2', 30));

foreach (['x', 'y', 'z'] as $name) {
    $a->lock($name, 0, 60);
}
$r->del('Lock:y');
check('unlockAll answers false when one lock was gone', !$a->unlockAll());
check('and released the others', $r->exists('Lock:x', 'Lock:z') === 0 && !$a->isLocking('x'));
$a->lock('x');
check('unlockAll answers true when all were held', $a->unlockAll() && $r->exists('Lock:x') === 0);

$reader1 = new RedisLock(connect($port));
$reader2 = new RedisLock(connect($port));
$writer = new RedisLock(connect($port));
check('readers share a read lock', $reader1->readLock('doc') && $reader2->readLock('doc'));
check('each with its own, greater fence', $reader2->fence('doc') > $reader1->fence('doc'));
$info = $r->rawCommand('LOCK.INFO', 'Lock:doc');
$fields = array_combine(array_values(array_filter($info, function ($k) { return $k % 2 === 0; }, ARRAY_FILTER_USE_KEY)), array_values(array_filter($info, function ($k) { return $k % 2 === 1; }, ARRAY_FILTER_USE_KEY)));
check('LOCK.INFO says shared, 2 holders', $fields['mode'] === 'shared' && (int) $fields['holders'] === 2);
check('both readers are isLocking', $reader1->isLocking('doc') && $reader2->isLocking('doc'));
check('a writer cannot join them', !$writer->writeLock('doc'));
$reader1->unlock('doc');
$reader2->unlock('doc');
check('the writer takes it once they are gone', $writer->writeLock('doc', 1) && !$reader1->readLock('doc'));
$writer->unlock('doc');
$permits = [new RedisLock(connect($port)), new RedisLock(connect($port)), new RedisLock(connect($port))];
check('a semaphore gives out its permits', $permits[0]->semaphore('api', 2) && $permits[1]->semaphore('api', 2));
check('and no more', !$permits[2]->semaphore('api', 2));
check('a limit that disagrees is an error naming LIMIT', throws(function () use ($permits) {
    $permits[2]->semaphore('api', 3);
}, 'LIMIT'));
check('a bad number of permits is refused before any command', throws(function () use ($permits) {
    $permits[2]->semaphore('api', 0);
}, 'permits'));
$permits[0]->unlock('api');
check('a freed permit goes to the next', $permits[2]->semaphore('api', 2, 1));
$permits[1]->unlockAll();
$permits[2]->unlockAll();
check('unlock releases every permit', $r->exists('Lock:api') === 0);

$custom = new RedisLock($r, 'app:lock:');
check('the key prefix is the constructor\'s', $custom->lock('job') && $r->exists('app:lock:job') === 1);
$custom->unlock('job');

$worker = connect($port);
$session = new RedisLock($worker, 'Lock:', 0);
$session->lock('report', 0, 600);
$info = $r->rawCommand('LOCK.INFO', 'Lock:report');
check('a session lock is bound to its connection', in_array('connected', $info, true));
$worker->close();
$deadline = microtime(true) + 10;
while ($r->exists('Lock:report') === 1 && microtime(true) < $deadline) {
    usleep(5000);
}
check('and goes with it, not after its 10-minute expire', $r->exists('Lock:report') === 0);

$r->set('Lock:legacy', 'an old SETNX lock');
check('a key of another type raises a LockException naming WRONGTYPE', throws(function () use ($a) {
    $a->lock('legacy');
}, 'WRONGTYPE'));
check('and is left as it was', $r->get('Lock:legacy') === 'an old SETNX lock');
check('expire 0 is refused', throws(function () use ($a) {
    $a->lock('bad', 0, 0);
}, 'expire'));
check('a negative session is refused', throws(function () use ($r) {
    new RedisLock($r, 'Lock:', -1);
}, 'sessionSeconds'));
check('an empty name is refused', throws(function () use ($a) {
    $a->lock('');
}, 'name'));
check('and nothing was taken', $r->exists('Lock:bad', 'Lock:') === 0);

// --- RedisQueue ------------------------------------------------------------------------

$queue = new RedisQueue($r);
check('enqueue adds new tasks', $queue->enqueue('mail', 'low', 1) && $queue->enqueue('mail', 'high', 9) && $queue->enqueue('mail', 'mid', 5));
check('enqueue of a queued task answers false', !$queue->enqueue('mail', 'mid', 6));
check('top reads the highest first, leaving them queued', $queue->top('mail', 2) === ['high', 'mid'] && $r->zCard('Queue:mail') === 3);
check('dequeue removes a task', $queue->dequeue('mail', 'high') && !$queue->dequeue('mail', 'high'));
check('pop takes the highest', $queue->pop('mail', 1) === ['mid'] && $queue->pop('mail', 5) === ['low']);
check('pop of an empty queue answers []', $queue->pop('mail') === [] && $r->exists('Lock:Queue:mail') === 0);

$busy = new RedisLock(connect($port));
$busy->lock('Queue:mail', 0, 30);
$queue->enqueue('mail', 'waiting', 1);
check('pop waits for the queue lock and gives up with a LockException', throws(function () use ($r) {
    (new RedisQueue($r, null, 0.2))->pop('mail');
}, 'locked'));
check('leaving the task queued', $queue->top('mail') === ['waiting']);
$busy->unlockAll();

for ($i = 0; $i < 300; $i++) {
    $queue->enqueue('jobs', sprintf('job-%03d', $i), $i % 7);
}
$outputs = runAll(array_fill(0, 10, [__DIR__ . '/pop_worker.php', (string) $port, 'jobs']));
$taken = array_values(array_filter(explode("\n", implode("\n", $outputs)), 'strlen'));
check('10 workers popping at once take each of 300 tasks exactly once', count($taken) === 300 && count(array_unique($taken)) === 300);

// --- the flash sale ----------------------------------------------------------------------

$sale = __DIR__ . '/../examples/flash_sale.php';
runAll([[$sale, (string) $port, 'setup', '20']]);
$buyers = [];
for ($i = 0; $i < 50; $i++) {
    $buyers[] = [$sale, (string) $port, 'buy', "buyer-$i"];
}
$results = array_map('trim', runAll($buyers));
$counts = array_count_values($results);
check('50 concurrent buyers of 20 items: 20 bought, 30 sold out', ($counts['bought'] ?? 0) === 20 && ($counts['sold out'] ?? 0) === 30);
check('the stock is 0 and there are 20 orders, never more', trim(runAll([[$sale, (string) $port, 'report']])[0]) === 'stock=0 orders=20');
check('each buyer ordered at most once', count(array_unique($r->lRange('sale:orders', 0, -1))) === 20);

echo "php: $passed checks passed\n";
