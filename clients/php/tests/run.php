<?php

// Checks RedisLock, RedisQueue and the flash-sale example against a server with the
// module, a cluster of servers with it and a Sentinel watching the first server as
// `mymaster`:   php run.php PORT CLUSTER_PORT SENTINEL_PORT
// Prints one line per check; exits non-zero on the first failure.
// clients/rust/tests/packages/other_languages.rs starts the server and runs this.

declare(strict_types=1);

require __DIR__ . '/../autoload.php';
require __DIR__ . '/harness.php';

use RedisLock\Election;
use RedisLock\LockException;
use RedisLock\RedisLock;
use RedisLock\RedisQueue;
use RedisLock\Redlock;

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

/** Starts `php $args...`; `finish()` collects its output. */
function start(array $args): array
{
    $pipes = [];
    $proc = proc_open(array_merge([PHP_BINARY], $args), [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
    return [$proc, $pipes];
}

/** Waits for a process `start()` started and returns its output; exits if it failed. */
function finish(array $started): string
{
    [$proc, $pipes] = $started;
    $out = stream_get_contents($pipes[1]);
    $err = stream_get_contents($pipes[2]);
    $status = proc_close($proc);
    if ($status !== 0) {
        fwrite(STDERR, "a child failed ($status): $out $err\n");
        exit(1);
    }
    return $out;
}

/** Runs `php $args...` processes at once; returns their outputs, in start order. */
function runAll(array $commands): array
{
    return array_map('finish', array_map('start', $commands));
}

/**
 * Runs `$first`, waits until it holds `$lockKey`, then runs `$second`; returns both
 * outputs. Started together, a loaded machine could start the second first.
 */
function afterItLocks(Redis $r, string $lockKey, array $first, array $second): array
{
    $running = start($first);
    $deadline = microtime(true) + 20;
    while ($r->exists($lockKey) !== 1) {
        if (microtime(true) > $deadline) {
            fwrite(STDERR, "$lockKey was never locked\n");
            exit(1);
        }
        usleep(1000);
    }
    $then = start($second);
    return [finish($running), finish($then)];
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

// lockAll: several names at once, all or none (LOCK.ACQUIREALL).
check('lockAll takes every free name at once', $a->lockAll(['acct:7', 'acct:9']));
check('with a fence per name', $a->fence('acct:7') > 0 && $a->fence('acct:9') > 0 && $a->fence('acct:7') !== $a->fence('acct:9'));
check('lockAll takes none when one is busy', !$b->lockAll(['acct:3', 'acct:9']) && $r->exists('Lock:acct:3') === 0);
check('each name is then an ordinary lock', $a->isLocking('acct:7') && $a->isLocking('acct:9'));
check('expireAll extends them together', $a->expireAll(['acct:7', 'acct:9'], 30) && $r->pTtl('Lock:acct:9') > 20000);
check('a waiting lockAll is granted once they are free', (function () use ($a, $r, $port): bool {
    $child = start(['-r', 'require "' . __DIR__ . '/../autoload.php"; $l = new RedisLock\\RedisLock((function () { $r = new Redis(); $r->connect("127.0.0.1", ' . $port . '); return $r; })()); echo $l->lockAll(["acct:9", "acct:7"], 10) ? "granted" : "not granted";']);
    $deadline = microtime(true) + 10;
    while ((int) ($r->info('lock')['lock_waiters'] ?? 0) < 1 && microtime(true) < $deadline) {
        usleep(2000); // polled until the child waits in the server's queues
    }
    $a->unlockAll(['acct:7', 'acct:9']);
    return trim(finish($child)) === 'granted';
})());
check('lockAll refuses bad names', throws(function () use ($a) {
    $a->lockAll([]);
}, 'lockAll') && throws(function () use ($a) {
    $a->lockAll(['x', 'x']);
}, 'lockAll'));

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

// --- RedisQueue (the articles' delayed queue) ---------------------------------------------

$queue = new RedisQueue(['host' => '127.0.0.1', 'port' => $port]);
$now = time();
check('enqueue queues ids due now, one or several', $queue->enqueue('mail', 'first') && $queue->enqueue('mail', ['second', 'third']));
check('each scored with its enqueue time', abs((int) $r->zScore('Queue:mail', 'first') - $now) <= 1);
check('a delayed id is scored later', $queue->enqueue('mail', 'later', 10, 60) && (int) $r->zScore('Queue:mail', 'later') >= $now + 59);
$r->zAdd('Queue:mail', ['XX'], $now - 100, 'first'); // as if queued 100 s ago
check('enqueue never moves a known id', $queue->enqueue('mail', 'first', 10, 30) && (int) $r->zScore('Queue:mail', 'first') === $now - 100);
$top = $queue->top('mail');
check('top(1) is the oldest due task as an id/score pair', $top === ['id' => 'first', 'score' => $now - 100]);
check('top reads without removing', $r->zCard('Queue:mail') === 4);
$due = $queue->top('mail', 10);
check('top(n) lists only due tasks, oldest first', array_column($due, 'id') === ['first', 'second', 'third']);
check('dequeue with another score removes nothing', !$queue->dequeue('mail', 'second', $now - 5000) && $r->zScore('Queue:mail', 'second') !== false);
check('dequeue with its score removes it', $queue->dequeue('mail', 'second', $due[1]['score']) && $r->zScore('Queue:mail', 'second') === false);
check('pop(1) takes the oldest due task as a pair', $queue->pop('mail') === ['id' => 'first', 'score' => $now - 100]);
check('pop(n) takes the due ones only, as a list', array_column($queue->pop('mail', 5), 'id') === ['third']);
check('the delayed task stays queued', $r->zCard('Queue:mail') === 1 && $queue->top('mail') === false);
check('pop(1) of nothing due answers false, pop(n) []', $queue->pop('mail') === false && $queue->pop('mail', 5) === []);
check('no queue lock is left behind', $r->exists('Lock:Queue:mail') === 0);

$busy = new RedisLock(connect($port));
$busy->lock('Queue:mail', 0, 30);
$queue->enqueue('jobs-busy', 'x');
$started = microtime(true);
check('a step waits for the queue lock, then answers false', (new RedisQueue($r))->pop('mail', 1, 0.2) === false && microtime(true) - $started >= 0.2);
check('enqueue too', !(new RedisQueue($r))->enqueue('mail', 'y', 0.2));
$busy->unlockAll();
$before = $r->zCard('Queue:mail');
check('enqueue answers false to bad input, as the articles do', $queue->enqueue('', 'x') === false
    && $queue->enqueue('mail', '') === false && $queue->enqueue('mail', []) === false
    && $queue->enqueue('mail', ['a', '']) === false && $queue->enqueue('mail', 'x', 0) === false
    && $queue->enqueue('mail', 'x', -1) === false && $queue->enqueue('mail', 'x', 10, -5) === false);
check('dequeue too', $queue->dequeue('', 'later', 1) === false && $queue->dequeue('mail', '', 1) === false
    && $queue->dequeue('mail', 'later', 'soon') === false);
check('pop and top answer [] to an empty name or a count under 1', $queue->pop('') === []
    && $queue->pop('mail', 0) === [] && $queue->top('') === [] && $queue->top('mail', -1) === []);
check('and nothing changed', $r->zCard('Queue:mail') === $before && $r->exists('Queue:', 'Lock:Queue:') === 0);

for ($i = 0; $i < 300; $i++) {
    $queue->enqueue('jobs', sprintf('job-%03d', $i));
}
$outputs = runAll(array_fill(0, 10, [__DIR__ . '/pop_worker.php', (string) $port, 'jobs']));
$taken = array_values(array_filter(explode("\n", implode("\n", $outputs)), 'strlen'));
check('10 workers popping at once take each of 300 tasks exactly once', count($taken) === 300 && count(array_unique($taken)) === 300);

// --- connections: config arrays, OPT_PREFIX, RedisCluster ---------------------------------

$fromParam = new RedisLock(['host' => '127.0.0.1', 'port' => $port, 'timeout' => 2, 'index' => 3]);
check('RedisLock takes the articles\' config array', $fromParam->lock('cfg'));
$r->select(3);
check('and its database index', $r->exists('Lock:cfg') === 1);
$r->select(0);
$fromParam->unlockAll();
check('a bad config is a LockException', throws(function () {
    new RedisLock('redis://nowhere');
}, 'config array'));

$prefixed = connect($port);
$prefixed->setOption(Redis::OPT_PREFIX, 'app:');
$withPrefix = new RedisLock($prefixed);
check('OPT_PREFIX applies to the lock key', $withPrefix->lock('job') && $r->exists('app:Lock:job') === 1 && $r->exists('Lock:job') === 0);
check('and to every lock command', $withPrefix->isLocking('job') && $withPrefix->expire('job', 30) && $withPrefix->unlock('job') && $r->exists('app:Lock:job') === 0);
$prefixedQueue = new RedisQueue($prefixed);
check('a queue on a prefixed connection', $prefixedQueue->enqueue('q', 'a') && $r->zCard('app:Queue:q') === 1 && $prefixedQueue->pop('q')['id'] === 'a');

$clusterPort = (int) ($argv[2] ?? 0);
$cluster = new RedisCluster(null, ["127.0.0.1:$clusterPort"], 2.0, 0.5);
$c1 = new RedisLock($cluster);
$c2 = new RedisLock(['cluster' => ["127.0.0.1:$clusterPort"], 'timeout' => 2, 'read_timeout' => 0.5]);
check('RedisLock works on a RedisCluster', $c1->lock('cl:order') && $c1->isLocking('cl:order') && !$c2->lock('cl:order'));
$held = $c1->fence('cl:order');
$c1->expire('cl:order', 0.8);
$started = microtime(true);
check('a wait on a cluster outlasts its read timeout (0.5 s)', $c2->lock('cl:order', 5) && microtime(true) - $started >= 0.6);
check('with a greater fence', $c2->fence('cl:order') > $held);
check('and releases there', $c2->unlock('cl:order') && !$c1->unlock('cl:order'));
$sentinelPort = (int) ($argv[3] ?? 0);
$viaSentinel = new RedisLock(['sentinel' => ["127.0.0.1:1", "127.0.0.1:$sentinelPort"], 'service' => 'mymaster', 'timeout' => 1]);
check('RedisLock finds the master through a Sentinel (skipping one that is down)', $viaSentinel->lock('sentinel:job') && $r->exists('Lock:sentinel:job') === 1);
$viaSentinel->unlockAll();
check('an unknown service is a LockException', throws(function () use ($sentinelPort) {
    new RedisLock(['sentinel' => ["127.0.0.1:$sentinelPort"], 'service' => 'nobody', 'timeout' => 1]);
}, 'nobody'));
$clusterQueue = new RedisQueue($cluster);
check('RedisQueue works on a RedisCluster', $clusterQueue->enqueue('cq', ['a', 'b']) && count($clusterQueue->pop('cq', 5)) === 2);

// --- Redlock (three masters in the conformance suite; one here) ----------------------------

$invalid = function (callable $call): bool {
    try {
        $call();
    } catch (InvalidArgumentException $e) {
        return true;
    }
    return false;
};
check('Redlock refuses no masters, an unknown setting and a bad ttl before any command', $invalid(function () {
    new Redlock([]);
}) && $invalid(function () use ($port) {
    new Redlock([connect($port)], ['retries' => 3]);
}) && $invalid(function () use ($port) {
    (new Redlock([connect($port)]))->lock('redlock:php', 0);
}) && $r->exists('redlock:php') === 0);
$redlock = new Redlock([connect($port)], ['retryCount' => 0]);
$held = $redlock->lock('redlock:php', 10000);
check('a Redlock on one master: held, with its validity and fence', is_array($held) && $held['validity'] > 9000
    && $held['validity'] <= 10000 - 102 && $held['fences'][0] > 0 && $r->pTtl('redlock:php') > 9000);
check('another is refused after its one attempt', $redlock->lock('redlock:php', 10000) === false && $redlock->attempts() === 1);
check('unlock releases it on the master that held it', $redlock->unlock($held) === 1 && $r->exists('redlock:php') === 0);
check('a second unlock finds nothing to release', $redlock->unlock($held) === 0);

// --- leader election ----------------------------------------------------------------------

$e1 = new Election(connect($port), 'election:php', 10.0, 0.2);
$e2 = new Election(connect($port), 'election:php', 10.0, 0.2);
check('nobody leads at first', $e1->leader() === null);
$leadership = $e1->campaign('node-a');
$term = $leadership->term();
check('a campaign on a free election leads at once, with a Leadership and its term', $leadership instanceof \RedisLock\Leadership && $term > 0 && $e1->term() === $term && !$leadership->isLost());
check('leader() names it', $e1->leader() === [$term, 'node-a']);
check('another candidate times out while it leads', $e2->campaign('node-b', 0.1) === null && $e2->term() === null);
check('proclaim keeps the term with a new value', $leadership->proclaim('node-a2') && $e2->leader() === [$term, 'node-a2']);
check('the election proclaims for its last campaign too', $e1->proclaim('node-a2') && $e2->leader() === [$term, 'node-a2']);
check('refresh extends the term', $leadership->refresh() && $r->pTtl('election:php') > 9000);
$observer = $e2->observe($term);
check('resign hands over', $leadership->resign() && $leadership->isLost() && $e1->term() === null);
check('a resigned leadership proclaims nothing', !$leadership->proclaim('x') && !$leadership->refresh() && !$leadership->resign());
check('an observer sees nobody after it', $observer->current() === null);
$next = $e2->campaign('node-b')->term();
$observer->next();
check('then the next term, greater', $next > $term && $observer->current() === [$next, 'node-b']);
$r->set('election:php:wrongtype', 'not a lock');
check('an observer ends with an error it does not ride out (WRONGTYPE)', throws(function () use ($port) {
    (new Election(connect($port), 'election:php:wrongtype'))->observe()->current();
}, 'WRONGTYPE'));
$r->del('election:php');
check('a lost term refuses to proclaim and takes nothing', !$e2->proclaim('x') && $e2->leader() === null && !$e2->refresh());
check('and its Leadership says it is lost', $e2->term() === null);

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

// A buyer that stalls past its lock's TTL, beside a punctual one, for the last item.
// The stalled buyer takes the lock first (its lock lives 200 ms), and stalls long enough
// for the punctual one, started once it holds the lock, to buy meanwhile.
runAll([[$sale, (string) $port, 'setup', '1']]);
$late = afterItLocks($r, 'sale:recipe-lock', [$sale, (string) $port, 'recipe-stall', 'late', '1500'],
    [$sale, (string) $port, 'recipe-buy', 'punctual']);
check('the SET NX recipe sells the last item twice to a stalled buyer and a punctual one',
    array_map('trim', $late) === ['bought', 'bought']
    && trim(runAll([[$sale, (string) $port, 'report']])[0]) === 'stock=-1 orders=2');
runAll([[$sale, (string) $port, 'setup', '1']]);
$late = afterItLocks($r, 'Lock:sale', [$sale, (string) $port, 'stall', 'late', '1500'],
    [$sale, (string) $port, 'buy', 'punctual']);
check('with LOCK.DO the stalled buyer\'s DECR is refused: the item is sold once',
    array_map('trim', $late) === ['lost the lock', 'bought']
    && trim(runAll([[$sale, (string) $port, 'report']])[0]) === 'stock=0 orders=1');

// --- fenced writes --------------------------------------------------------------------------

$f = new RedisLock(connect($port));
check('do() runs a command while the lock is held', $f->lock('fenced') && in_array($f->do('fenced', 'SET', 'fenced:data', 'v'), [true, 'OK'], true)
    && $r->get('fenced:data') === 'v');
check('do() answers the command\'s reply', $f->do('fenced', 'INCR', 'fenced:n') === 1);
$r->del('Lock:fenced');
check('do() under a lost lock throws NOTHELD and runs nothing', throws(function () use ($f) {
    $f->do('fenced', 'SET', 'fenced:data', 'late');
}, 'NOTHELD') && $r->get('fenced:data') === 'v');
check('do() without holding the lock throws', throws(function () use ($f) {
    $f->do('other', 'GET', 'x');
}, 'does not hold'));

// --- the watchdog (a helper process extends the lock) -------------------------------------

/** Polls `$ok` every 10 ms until it is true or `$ms` ms have passed. */
function within(int $ms, callable $ok): bool
{
    $deadline = microtime(true) + $ms / 1000;
    while (!$ok()) {
        if (microtime(true) > $deadline) {
            return false;
        }
        usleep(10000);
    }
    return true;
}

$w = new RedisLock(connect($port));
check('watch() refuses a lock this object does not hold', throws(function () use ($w) {
    $w->watch('dog');
}, 'does not hold'));
// A TTL of 2 s, the shortest the docs give a watched lock: the helper is a new PHP
// process, whose start takes hundreds of ms on a loaded machine before its first extend
// (due after a third of the TTL); 1 s was not always enough beside a CPU hog.
$w->lock('dog', 0, 2.0);
$fence = $w->fence('dog');
$dog = $w->watch('dog');
usleep(3500000);
check('a watched lock outlives its 2 s ttl, with the same fence', !$dog->isLost() && $w->isLocking('dog')
    && $r->exists('Lock:dog') === 1 && $w->fence('dog') === $fence);
check('watch() again answers the same watchdog', $w->watch('dog') === $dog);
$helpers = [];
foreach (glob('/proc/[0-9]*/cmdline') ?: [] as $cmdline) {
    $args = explode("\0", rtrim((string) @file_get_contents($cmdline), "\0"));
    if (substr($args[1] ?? '', -strlen('bin/watchdog.php')) === 'bin/watchdog.php') {
        $helpers[] = $args;
    }
}
check('the helper process runs with no argument: no token on its command line', $helpers !== []
    && array_filter($helpers, function ($args) {
        return count($args) !== 2;
    }) === []);
check('unlock releases a watched lock', $w->unlock('dog') && $r->exists('Lock:dog') === 0 && !$dog->isLost());
$w->lock('dog', 0, 1.0);
$w->watch('dog')->stop();
check('a stopped watchdog extends no more: the lock expires at its ttl', within(5000, function () use ($r) {
    return $r->exists('Lock:dog') === 0;
}) && !$w->isLocking('dog'));
$w->unlock('dog');
$w->lock('dog', 0, 2.0);
$dog = $w->watch('dog');
$r->del('Lock:dog');
check('a lock deleted under the watchdog is reported lost', within(6000, function () use ($dog) {
    return $dog->isLost();
}));
$w->unlock('dog');

echo "php: $passed checks passed\n";
