<?php

// A flash sale that never oversells: every buyer is its own PHP process; it reads the
// stock under the sale's RedisLock and sells with one fenced DECR (`LOCK.DO`), which the
// server runs only while the buyer still holds the lock. A buyer that stalls past its
// lock's TTL (a GC pause, a stalled VM) and wakes up to sell can no longer sell: its DECR
// is refused and nothing runs. The same buyer on the SET NX recipe sells the item twice.
//
//   php flash_sale.php PORT setup STOCK            put STOCK items on sale
//   php flash_sale.php PORT buy BUYER [AFTER_MS]   one buyer tries once (AFTER_MS later):
//                                                  "bought" or "sold out"
//   php flash_sale.php PORT stall BUYER MS         a buyer whose lock lives 200 ms and who
//                                                  stalls MS ms after reading the stock:
//                                                  "bought", "sold out" or "lost the lock"
//   php flash_sale.php PORT recipe-stall BUYER MS  the same buyer on SET NX PX + a Lua release
//   php flash_sale.php PORT recipe-buy BUYER       a buyer on the recipe, after 100 ms
//   php flash_sale.php PORT report                 prints "stock=N orders=M"
//
// clients/php/tests/run.php (run by clients/rust/tests/packages/other_languages.rs) starts 50
// buyers at once against 20 items, and a stalled buyer beside a punctual one on each side.

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

use RedisLock\LockException;
use RedisLock\RedisLock;

[$script, $port, $action] = array_pad($argv, 3, null);
$redis = new Redis();
$redis->connect('127.0.0.1', (int) $port);

/** Sells one item if there is one, under the lock `$locks` holds; pauses `$stallMs` first. */
function sell(RedisLock $locks, Redis $redis, string $buyer, int $stallMs): string
{
    $stock = (int) $redis->get('sale:stock');
    usleep(2000 + $stallMs * 1000); // checking the payment (others would read the same stock now)
    if ($stock <= 0) {
        return 'sold out';
    }
    try {
        $locks->do('sale', 'DECR', 'sale:stock');   // only while the lock is still ours
    } catch (LockException $e) {
        return 'lost the lock';
    }
    $redis->rPush('sale:orders', $buyer);
    return 'bought';
}

/** The recipe: SET NX PX to lock (retried every 10 ms), a Lua compare-and-delete to unlock. */
function recipeSell(Redis $redis, string $buyer, int $ttlMs, int $stallMs): string
{
    $token = bin2hex(random_bytes(16));
    while (!$redis->set('sale:recipe-lock', $token, ['nx', 'px' => $ttlMs])) {
        usleep(10000);
    }
    $stock = (int) $redis->get('sale:stock');
    usleep(2000 + $stallMs * 1000);
    $result = 'sold out';
    if ($stock > 0) {
        $redis->decr('sale:stock');                 // nothing checks the lock any more
        $redis->rPush('sale:orders', $buyer);
        $result = 'bought';
    }
    $redis->eval("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
        ['sale:recipe-lock', $token], 1);
    return $result;
}

switch ($action) {
    case 'setup':
        $redis->del('sale:stock', 'sale:orders', 'sale:recipe-lock', 'Lock:sale');
        $redis->set('sale:stock', (string) (int) $argv[3]);
        break;
    case 'buy':
    case 'stall':
        $stall = $action === 'stall';
        if (!$stall && isset($argv[4])) {
            usleep((int) $argv[4] * 1000); // after the stalled buyer has its lock
        }
        // session 0: a buyer that crashes mid-purchase frees the sale at once
        $locks = new RedisLock($redis, 'Lock:', $stall ? null : 0);
        if (!$locks->lock('sale', 30, $stall ? 0.2 : 5)) {
            echo "busy\n";
            exit(1);
        }
        try {
            echo sell($locks, $redis, $argv[3], $stall ? (int) $argv[4] : 0), "\n";
        } finally {
            $locks->unlock('sale');
        }
        break;
    case 'recipe-stall':
        echo recipeSell($redis, $argv[3], 200, (int) $argv[4]), "\n";
        break;
    case 'recipe-buy':
        usleep(100000); // after the stalled buyer has its lock
        echo recipeSell($redis, $argv[3], 5000, 0), "\n";
        break;
    case 'report':
        printf("stock=%d orders=%d\n", (int) $redis->get('sale:stock'), $redis->lLen('sale:orders'));
        break;
    default:
        fwrite(STDERR, "usage: php flash_sale.php PORT setup STOCK | buy BUYER | stall BUYER MS"
            . " | recipe-stall BUYER MS | recipe-buy BUYER | report\n");
        exit(2);
}
