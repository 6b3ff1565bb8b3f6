<?php

// A flash sale that never oversells: every buyer is its own PHP process, and the stock
// is read and written back (a deliberately non-atomic read-modify-write, as shop code
// often is) only under the sale's RedisLock.
//
//   php flash_sale.php PORT setup STOCK     put STOCK items on sale
//   php flash_sale.php PORT buy BUYER       one buyer tries once; prints "bought" or "sold out"
//   php flash_sale.php PORT report          prints "stock=N orders=M"
//
// clients/php/tests/run.php (run by clients/rust/tests/packages/other_languages.rs) starts 50 buyers
// at once against 20 items.

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

use RedisLock\RedisLock;

[$script, $port, $action] = array_pad($argv, 3, null);
$redis = new Redis();
$redis->connect('127.0.0.1', (int) $port);

switch ($action) {
    case 'setup':
        $redis->del('sale:stock', 'sale:orders');
        $redis->set('sale:stock', (string) (int) $argv[3]);
        break;
    case 'buy':
        // session 0: a buyer that crashes mid-purchase frees the sale at once
        $locks = new RedisLock($redis, 'Lock:', 0);
        if (!$locks->lock('sale', 30, 5)) {
            echo "busy\n";
            exit(1);
        }
        try {
            $stock = (int) $redis->get('sale:stock');
            usleep(2000); // checking the payment: others would read the same stock now
            if ($stock > 0) {
                $redis->set('sale:stock', (string) ($stock - 1));
                $redis->rPush('sale:orders', $argv[3]);
                echo "bought\n";
            } else {
                echo "sold out\n";
            }
        } finally {
            $locks->unlock('sale');
        }
        break;
    case 'report':
        printf("stock=%d orders=%d\n", (int) $redis->get('sale:stock'), $redis->lLen('sale:orders'));
        break;
    default:
        fwrite(STDERR, "usage: php flash_sale.php PORT setup STOCK | buy BUYER | report\n");
        exit(2);
}
