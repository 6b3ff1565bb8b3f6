<?php

// Composer's autoloader when `composer install` has run here; otherwise the same PSR-4
// mapping, read from composer.json, so a checkout works without Composer.
if (is_file(__DIR__ . '/vendor/autoload.php')) {
    require __DIR__ . '/vendor/autoload.php';
    return;
}
$composer = json_decode((string) file_get_contents(__DIR__ . '/composer.json'), true);
foreach ($composer['autoload']['psr-4'] as $prefix => $dir) {
    spl_autoload_register(static function (string $class) use ($prefix, $dir): void {
        if (strncmp($class, $prefix, strlen($prefix)) !== 0) {
            return;
        }
        $file = __DIR__ . '/' . $dir . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    });
}
