<?php
/**
 * The helper process of RedisLock\Watchdog: reads one JSON line (host, port, auth, db,
 * key, token, ttl in ms, since: the hrtime in ns at which the grant was asked for,
 * replicas and replicasTimeout: the lock's RedisLock\Replicas) from stdin, then extends
 * the lock every third of its TTL until stdin closes (stopped) or the lock is lost, which
 * it reports by writing "lost". Each extend asks the server to hold its reply until its
 * replicas have it (where the server cannot, Redis 7.0, it goes with the WAIT they need,
 * in one round trip); one too few replicas acknowledged counts as not made, and is tried
 * again.
 */

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

$job = json_decode((string) fgets(STDIN), true);
if (!is_array($job)) {
    exit(2);
}
$ttl = (int) $job['ttl'];
$replicas = new RedisLock\Replicas($job['replicas'] ?? 'auto', $job['replicasTimeout'] ?? null, (bool) ($job['fsync'] ?? false));
$address = $job['host'] . ':' . $job['port'];
// Whether the server holds the extend's reply for its replicas (until it refuses).
$serverWaits = true;
$lost = function (): void {
    fwrite(STDOUT, "lost\n");
    exit(0);
};
$now = function (): float {
    return hrtime(true) / 1e9;
};
$connect = function (float $left) use ($job): ?Redis {
    $redis = new Redis();
    try {
        if (!$redis->connect($job['host'], (int) $job['port'], max($left, 0.001))) {
            return null;
        }
        if ($job['auth'] !== null && !$redis->auth($job['auth'])) {
            return null;
        }
        if ($job['db'] !== 0 && !$redis->select((int) $job['db'])) {
            return null;
        }
    } catch (RedisException $e) {
        return null;
    }
    return $redis;
};

// hrtime is the system's monotonic clock, the same in the owner's process and here.
$heldUntil = (int) $job['since'] / 1e9 + $ttl / 1000;
$redis = null;
$pause = $ttl / 3000;
while (true) {
    // Wait a third of the TTL, or until the owner stops the watchdog (stdin closes).
    $read = [STDIN];
    $none = null;
    if (stream_select($read, $none, $none, (int) $pause, (int) (($pause - floor($pause)) * 1e6)) > 0) {
        if (fgets(STDIN) === false) {
            exit(0);
        }
    }
    $sent = $now();
    $left = $heldUntil - $sent;
    if ($left <= 0) {
        $lost();
    }
    // After a failure, the next try comes sooner: a tenth of the TTL.
    $pause = $ttl / 10000;
    $redis = $redis ?? $connect($left);
    if ($redis === null) {
        continue;
    }
    try {
        $redis->setOption(Redis::OPT_READ_TIMEOUT, $left);
        $extend = ['LOCK.EXTEND', $job['key'], $job['token'], (string) $ttl];
        $extended = null;
        if ($serverWaits) {
            // The server holds the reply until its replicas have the extend.
            $redis->clearLastError();
            $pipeline = $redis->multi(Redis::PIPELINE);
            foreach ($replicas->serverWrites([$extend], $ttl) as $command) {
                $pipeline->rawCommand(...$command);
            }
            $replies = $pipeline->exec();
            $error = (string) $redis->getLastError();
            $redis->clearLastError();
            if (($replies[0] ?? false) === false && preg_match("/REPLICAS needs|unknown option 'REPLICAS'/", $error)) {
                $serverWaits = false;   // Redis 7.0: the helper waits itself from now on
            } elseif (($replies[0] ?? false) === false && strpos($error, 'NOTREPLICATED') !== false) {
                continue;   // not replicated: held as before, tried again sooner
            } else {
                $extended = $replies[0] ?? false;
                if ($extended === 1 && $replicas->fsync() && $replicas->shortfall(0, $replies[1] ?? null) !== null) {
                    continue;   // not fsynced: tried again sooner
                }
            }
        }
        if (!$serverWaits) {
            // The server cannot wait (Redis 7.0): the replicas learned here (Redis70).
            $learned = $replicas->redis70();
            $required = 0;
            if (!$replicas->asksNoReplica()) {
                $online = $learned->known('');
                if ($online === null) {
                    $role = $redis->rawCommand('ROLE');
                    $online = $learned->learn('', $address, RedisLock\Redis70::onlineFrom($role === false ? $redis->rawCommand('WAIT', '0', '0') : $role));
                }
                $required = $replicas->required($online, $job['key']);
            }
            $pipeline = $redis->multi(Redis::PIPELINE);
            $pipeline->rawCommand(...$extend);
            foreach ($replicas->waitCommands($required, $ttl) as $wait) {
                $pipeline->rawCommand(...$wait);
            }
            $replies = $pipeline->exec();
            $extended = $replies[0] ?? false;
            $waited = !$replicas->off();
            if ($extended === 1 && $waited && $replicas->shortfall($required, $replies[1] ?? null) !== null) {
                $learned->forget('');
                continue;   // not replicated: held as before, tried again sooner
            }
        }
    } catch (RedisLock\LockException $e) {
        continue;   // too few replicas online for an explicit number: tried again
    } catch (RedisException $e) {
        $redis = null;   // no answer in time, or the connection broke
        if ($heldUntil - $now() <= 0) {
            $lost();
        }
        continue;
    }
    if ($extended !== 1) {
        $lost();
    }
    $heldUntil = $sent + $ttl / 1000;
    $pause = $ttl / 3000;
}
