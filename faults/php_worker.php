<?php
// A module worker of a fault run written with the project's PHP package (clients/php:
// RedisLock on phpredis), with its defaults (`replicas` 'auto'): the same rounds as the
// Python and Node workers (a waiting acquire, plain, session-bound or shared; an
// `expire` renewal in every other round; a write through LOCK.DO; the release), the same
// history (JSON lines, times on the machine's monotonic clock: hrtime) and state file.
// The harness starts it with a preloaded library that binds its connections to its own
// loopback address (phpredis cannot), so a partition can cut it alone; it asks the
// Sentinels for the master.
//
//   php faults/php_worker.php --id N --address A --sentinels a,b,c --service S --port P
//       --keys k1,k2 --ttl MS --wait MS --seed N --seconds S --history F --state F
//       [--replicas auto|n]

declare(strict_types=1);

require __DIR__ . '/../clients/php/autoload.php';

use RedisLock\LockException;
use RedisLock\NotReplicatedException;
use RedisLock\RedisLock;

$o = [];
for ($i = 1; $i + 1 < $argc; $i += 2) {
    $o[ltrim($argv[$i], '-')] = $argv[$i + 1];
}
$ttl = (int) $o['ttl'];
$wait = (int) $o['wait'];
$port = (int) $o['port'];
$name = 'module-' . $o['id'];
$replicas = ($o['replicas'] ?? 'auto') === 'auto' ? 'auto' : (int) $o['replicas'];
$seed = ((int) $o['seed']) & 0xffffffff;

/** mulberry32: the worker's choices, from its seed. */
function random(): float
{
    global $seed;
    $seed = ($seed + 0x6d2b79f5) & 0xffffffff;
    $t = $seed;
    $t = imul($t ^ ($t >> 15), $t | 1);
    $t ^= ($t + imul($t ^ ($t >> 7), $t | 61)) & 0xffffffff;
    return (($t ^ ($t >> 14)) & 0xffffffff) / 4294967296;
}

/** 32-bit multiplication, wrapping, of two unsigned 32-bit numbers. */
function imul(int $a, int $b): int
{
    $low = ($a & 0xffff) * $b;
    $high = ((($a >> 16) & 0xffff) * $b) & 0xffff;
    return ($low + ($high << 16)) & 0xffffffff;
}

function choice(array $items)
{
    return $items[(int) floor(random() * count($items)) % count($items)];
}

function uniform(float $lo, float $hi): float
{
    return $lo + ($hi - $lo) * random();
}

function now(): float
{
    return hrtime(true) / 1e9;
}

function logged(array $entry): void
{
    global $o, $name;
    $entry['w'] = $name;
    file_put_contents($o['history'], json_encode($entry, JSON_PRESERVE_ZERO_FRACTION) . "\n", FILE_APPEND);
}

function state(string $phase, ?string $key = null, float $answeredAt = 0.0, ?string $mode = null): void
{
    global $o;
    file_put_contents($o['state'] . '.new', json_encode(['phase' => $phase, 'key' => $key, 'answered_at' => $answeredAt, 'mode' => $mode]));
    rename($o['state'] . '.new', $o['state']);
}

/** @var Redis|null */
$master = null;
/** @var array<string, RedisLock> mode => the package's object for it */
$locks = [];
$masterHost = null;

function connect(): bool
{
    global $o, $port, $wait, $replicas, $master, $locks, $masterHost;
    $sentinels = explode(',', $o['sentinels']);
    usort($sentinels, fn () => random() < 0.5 ? -1 : 1);
    foreach ($sentinels as $sentinel) {
        try {
            $probe = new Redis();
            if (!@$probe->connect($sentinel, $port, 0.5, null, 0, 0.6)) {
                continue;
            }
            $reply = $probe->rawCommand('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', $o['service']);
            $probe->close();
            if (!is_array($reply)) {
                continue;
            }
            $masterHost = (string) $reply[0];
            $master = new Redis();
            // The read timeout is longer than a wait, so the package's waiting acquire
            // ends by its wait, not by the connection.
            if (!@$master->connect($masterHost, $port, 0.5, null, 0, $wait / 1000 + 1.0)) {
                drop();
                continue;
            }
            $locks = [
                'plain' => new RedisLock($master, '', null, $replicas),
                'shared' => new RedisLock($master, '', null, $replicas),
                'session' => new RedisLock($master, '', 0.2, $replicas),
            ];
            return true;
        } catch (RedisException $e) {
            drop();
        }
    }
    return false;
}

function drop(): void
{
    global $master, $locks;
    if ($master !== null) {
        try {
            $master->close();
        } catch (Throwable $e) {
            // closed already
        }
    }
    [$master, $locks] = [null, []];
}

/**
 * What a call answered: ['ok' => true|false|null, 'value' => ..., 'err' => ...], ok null
 * when the server was not reached (or is no master now).
 */
function attempt(callable $call): array
{
    try {
        return ['ok' => true, 'value' => $call(), 'err' => null];
    } catch (NotReplicatedException $e) {
        return ['ok' => false, 'value' => null, 'err' => 'NOTREPLICATED ' . $e->getMessage()];
    } catch (LockException $e) {
        if (strpos($e->getMessage(), 'NOTHELD') !== false) {
            return ['ok' => false, 'value' => null, 'err' => 'NOTHELD ' . $e->getMessage()];
        }
        drop(); // READONLY, MASTERDOWN, ...: the master moved; find it again
        return ['ok' => null, 'value' => null, 'err' => $e->getMessage()];
    } catch (Throwable $e) {
        drop(); // unreachable, a broken connection
        return ['ok' => null, 'value' => null, 'err' => get_class($e) . ': ' . $e->getMessage()];
    }
}

function round_(): void
{
    global $o, $ttl, $wait, $name, $locks, $masterHost;
    $key = choice(explode(',', $o['keys']));
    $mode = choice(['plain', 'plain', 'session', 'shared']);
    if ($locks === [] && !connect()) {
        logged(['op' => 'acquire', 'key' => $key, 'mode' => $mode, 't0' => now(), 't1' => now(), 'ok' => null, 'err' => 'no master reachable']);
        usleep(50000);
        return;
    }
    $lock = $locks[$mode];
    $t0 = now();
    $got = attempt(fn () => $mode === 'shared'
        ? $lock->readLock($key, $wait / 1000, $ttl / 1000)
        : $lock->lock($key, $wait / 1000, $ttl / 1000));
    $t1 = now();
    if ($got['ok'] !== true || $got['value'] !== true) {
        logged(['op' => 'acquire', 'key' => $key, 'mode' => $mode, 't0' => $t0, 't1' => $t1, 'ok' => $got['ok'] === true ? false : $got['ok'], 'err' => $got['err']]);
        if ($got['err'] !== null) {
            usleep(50000);
        }
        return;
    }
    $fence = $lock->fence($key);
    logged(['op' => 'acquire', 'key' => $key, 'mode' => $mode, 't0' => $t0, 't1' => $t1, 'ok' => true, 'fence' => $fence, 'ttl' => $ttl, 'token' => null, 'server' => $masterHost]);
    state('holding', $key, $t1, $mode);
    $pause = uniform(0.1, 0.3) * $ttl / 1000;
    if (random() < 0.5) {
        usleep((int) ($pause / 2 * 1e6));
        $r0 = now();
        $renewed = attempt(fn () => $lock->expire($key, $ttl / 1000));
        $ok = $renewed['ok'] === true ? $renewed['value'] === true : $renewed['ok'];
        logged(['op' => 'extend', 'key' => $key, 'fence' => $fence, 't0' => $r0, 't1' => now(), 'ok' => $ok, 'err' => $renewed['err']]);
        usleep((int) ($pause / 2 * 1e6));
    } else {
        usleep((int) ($pause * 1e6));
    }
    state('writing', $key, $t1, $mode);
    $w0 = now();
    $done = attempt(fn () => $mode === 'shared'
        ? $lock->do($key, 'LLEN', "data:$key")
        : $lock->do($key, 'RPUSH', "data:$key", "$fence:$name"));
    logged(['op' => 'do', 'key' => $key, 'fence' => $fence, 'read' => $mode === 'shared', 't0' => $w0, 't1' => now(), 'ok' => $done['ok'], 'err' => $done['err']]);
    usleep((int) (uniform(0, 0.1) * $ttl / 1000 * 1e6));
    state('idle');
    $r0 = now();
    $released = attempt(fn () => $lock->unlock($key));
    logged(['op' => 'release', 'key' => $key, 'fence' => $fence, 't0' => $r0, 't1' => now(), 'ok' => $released['ok'] === true && $released['value'] === true, 'err' => $released['ok'] === null ? $released['err'] : null]);
}

state('idle');
$deadline = now() + (float) $o['seconds'];
while (now() < $deadline) {
    round_();
}
