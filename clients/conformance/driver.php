<?php
/**
 * The PHP package's conformance driver: runs clients/conformance/scenarios.txt against
 * the masters in CONFORMANCE_PORTS (pids in CONFORMANCE_PIDS) with RedisLock\RedisLock
 * on phpredis, and prints one line per scenario (the format is described in the file).
 * The watchdog is `RedisLock::watch`, which keeps the lock from a helper process.
 */

require __DIR__ . '/../php/autoload.php';

use RedisLock\LockException;
use RedisLock\NotReplicatedException;
use RedisLock\RedisLock;
use RedisLock\Redlock;

const FEATURES = ['redlock', 'watchdog'];

final class Failed extends Exception
{
}

/** @return list<array{name: string, needs: list<string>, steps: list<array>}> */
function parseScenarios(string $path): array
{
    $scenarios = [];
    foreach (file($path, FILE_IGNORE_NEW_LINES) as $raw) {
        $line = rtrim($raw);
        if (trim($line) === '' || str_starts_with(ltrim($line), '#')) {
            continue;
        }
        if (str_starts_with($line, 'scenario ')) {
            $scenarios[] = ['name' => trim(substr($line, 9)), 'needs' => [], 'steps' => []];
            continue;
        }
        $text = trim($line);
        $last = count($scenarios) - 1;
        if (str_starts_with($text, 'needs ')) {
            $scenarios[$last]['needs'][] = preg_split('/\s+/', $text)[1];
            continue;
        }
        $at = strpos($text, ' -> ');
        $step = $at === false ? $text : substr($text, 0, $at);
        $expected = $at === false ? null : trim(substr($text, $at + 4));
        $overrides = [];
        while ($expected !== null && preg_match('/\s*\[([^:\]]+):([^\]]*)\]$/', $expected, $m, PREG_OFFSET_CAPTURE)) {
            $overrides[trim($m[1][0])] = trim($m[2][0]);
            $expected = trim(substr($expected, 0, $m[0][1]));
        }
        $scenarios[$last]['steps'][] = ['text' => $step, 'words' => preg_split('/\s+/', $step), 'expected' => $expected, 'overrides' => $overrides];
    }
    return $scenarios;
}

/** A reply as the scenarios write it (phpredis answers +OK with true, nil with false). */
function shown($reply): string
{
    if ($reply === null || $reply === false) {
        return 'nil';
    }
    if ($reply === true) {
        return 'OK';
    }
    if (is_array($reply)) {
        return 'array';
    }
    return (string) $reply;
}

function matches(string $got, string $expected): bool
{
    $words = preg_split('/\s+/', $expected);
    if ($words[0] === 'between') {
        return is_numeric($got) && (float) $words[1] <= (float) $got && (float) $got <= (float) $words[2];
    }
    return $got === $expected;
}

/** How the package reported a failure: a server's error reply, or a refused argument. */
function outcomeOf(Throwable $error): string
{
    if ($error instanceof NotReplicatedException) {
        return $error->refused ? 'too-few-replicas' : 'not-replicated';
    }
    if ($error instanceof LockException) {
        if (preg_match('/^[A-Z.]+: ([A-Z]+) /', $error->getMessage(), $m)) {
            return $m[1] === 'ERR' ? 'invalid' : 'error ' . $m[1];
        }
        return 'invalid';
    }
    return get_class($error) . ': ' . $error->getMessage();
}

final class Driver
{
    /** @var list<Redis> */
    private array $clients = [];
    /** @var array<string, array{RedisLock, string}> a lock's object and name on the server */
    private array $locks = [];
    /** @var array<string, array{Redlock, array|false}> a Redlock and what its lock() answered */
    private array $redlocks = [];

    /** @param list<int> $ports @param list<int> $pids */
    public function __construct(array $ports, private array $pids)
    {
        foreach ($ports as $port) {
            $redis = new Redis();
            $redis->connect('127.0.0.1', $port, 5.0);
            $this->clients[] = $redis;
        }
    }

    public function close(): void
    {
        foreach ($this->locks as [$locks, $key]) {
            $locks->unlock($key);
        }
        foreach ($this->clients as $redis) {
            $redis->close();
        }
    }

    public function lock(string $name, string $key, int $ttl, array $options): string
    {
        // One object per holder (each has its own tokens); keys without the 'Lock:' prefix.
        $replicasTimeout = isset($options['repltimeout']) ? $options['repltimeout'] / 1000 : null;
        $locks = new RedisLock($this->clients[$options['on'] ?? 0], '', null, $options['replicas'] ?? 'auto', $replicasTimeout);
        $this->locks[$name] = [$locks, $key];
        try {
            $wait = isset($options['wait']) ? $options['wait'] / 1000 : 0;
            if (!$locks->lock($key, $wait, $ttl / 1000)) {
                return 'busy';
            }
            if (isset($options['watchdog'])) {
                $locks->watch($key);
            }
            return 'granted';
        } catch (LockException $e) {
            return outcomeOf($e);
        }
    }

    public function release(string $name): string
    {
        [$locks, $key] = $this->locks[$name];
        return $locks->unlock($key) ? 'true' : 'false';
    }

    public function extend(string $name, int $ttl): string
    {
        [$locks, $key] = $this->locks[$name];
        try {
            return $locks->expire($key, $ttl / 1000) ? 'true' : 'false';
        } catch (NotReplicatedException $e) {
            return 'not-replicated';
        }
    }

    public function do(string $name, array $args): string
    {
        [$locks, $key] = $this->locks[$name];
        try {
            return shown($locks->do($key, ...$args));
        } catch (LockException $e) {
            if (str_contains($e->getMessage(), 'NOTHELD')) {
                return 'lost';
            }
            throw $e;
        }
    }

    public function held(string $name): string
    {
        [$locks, $key] = $this->locks[$name];
        return $locks->watch($key)->isLost() ? 'false' : 'true';
    }

    public function lostWithin(string $name, int $ms): string
    {
        [$locks, $key] = $this->locks[$name];
        $deadline = microtime(true) + $ms / 1000;
        while (!$locks->watch($key)->isLost()) {
            if (microtime(true) > $deadline) {
                return 'false';
            }
            usleep(10000);
        }
        return 'true';
    }

    public function fence(string $name): ?int
    {
        [$locks, $key] = $this->locks[$name];
        return $locks->fence($key);
    }

    public function server(int $index, array $args)
    {
        return $this->clients[$index]->rawCommand(...$args);
    }

    public function redlock(string $name, string $key, int $ttl, array $options): string
    {
        $settings = [];
        foreach (['retries' => 'retryCount', 'delay' => 'retryDelay', 'jitter' => 'retryJitter'] as $word => $setting) {
            if (isset($options[$word])) {
                $settings[$setting] = $options[$word];
            }
        }
        $redlock = new Redlock(array_slice($this->clients, 0, 3), $settings);
        $lock = $redlock->lock($key, $ttl);
        $this->redlocks[$name] = [$redlock, $lock, $lock === false ? 0 : $lock['validity']];
        return $lock === false ? 'refused' : 'granted';
    }

    public function attempts(string $name): string
    {
        return (string) $this->redlocks[$name][0]->attempts();
    }

    public function validity(string $name): int
    {
        return $this->redlocks[$name][2];
    }

    public function redlockRelease(string $name): string
    {
        [$redlock, $lock] = $this->redlocks[$name];
        return $lock !== false && $redlock->unlock($lock) > 0 ? 'true' : 'false';
    }

    public function signal(int $index, bool $stop): void
    {
        posix_kill($this->pids[$index], $stop ? SIGSTOP : SIGCONT);
    }
}

/** `name value` pairs, and `watchdog` alone. */
function options(array $words): array
{
    $found = [];
    for ($i = 0; $i < count($words);) {
        if ($words[$i] === 'watchdog') {
            $found['watchdog'] = 1;
            $i += 1;
            continue;
        }
        $found[$words[$i]] = (int) $words[$i + 1];
        $i += 2;
    }
    return $found;
}

function step(Driver $driver, array $words, array &$state): ?string
{
    $verb = $words[0];
    $args = array_slice($words, 1);
    switch ($verb) {
        case 'lock':
            return $driver->lock($args[0], $args[1], (int) $args[2], options(array_slice($args, 3)));
        case 'release':
            return $driver->release($args[0]);
        case 'extend':
            return $driver->extend($args[0], (int) $args[1]);
        case 'do':
            return $driver->do($args[0], array_slice($args, 1));
        case 'held':
            return $driver->held($args[0]);
        case 'lost':
            return $driver->lostWithin($args[0], (int) $args[2]);
        case 'fence-above':
            [$high, $low] = [$driver->fence($args[0]), $driver->fence($args[1])];
            if (!($high > $low)) {
                throw new Failed("fence $high is not above $low");
            }
            return null;
        case 'calls':
            return (string) callsOf($driver->server((int) $args[0], ['INFO', 'commandstats']), $args[1]);
        case 'waits':
        case 'own-waits':
            $stats = $driver->server((int) $args[0], ['INFO', 'commandstats']);
            if ($verb === 'waits') {
                return (string) (callsOf($stats, 'wait') + callsOf($stats, 'waitaof'));
            }
            $server = (string) $driver->server((int) $args[0], ['INFO', 'server']);
            return (string) (serverWaits($server) ? callsOf($stats, 'wait') : 0);
        case 'server':
            return shown($driver->server((int) $args[0], array_slice($args, 1)));
        case 'eventually':
            $deadline = microtime(true) + (int) end($args) / 1000;
            while (true) {
                $got = shown($driver->server((int) $args[0], array_slice($args, 1, -2)));
                if ($got === $state['expected'] || microtime(true) > $deadline) {
                    return $got;
                }
                usleep(20000);
            }
        case 'freeze':
        case 'thaw':
            $driver->signal((int) $args[0], $verb === 'freeze');
            if ($verb === 'freeze') {
                $state['frozen'][(int) $args[0]] = true;
            } else {
                unset($state['frozen'][(int) $args[0]]);
            }
            return null;
        case 'sleep':
            usleep((int) $args[0] * 1000);
            return null;
        case 'redlock':
            return $driver->redlock($args[0], $args[1], (int) $args[2], options(array_slice($args, 3)));
        case 'attempts':
            return $driver->attempts($args[0]);
        case 'validity-between':
            $validity = $driver->validity($args[0]);
            if (!((int) $args[1] <= $validity && $validity <= (int) $args[2])) {
                throw new Failed("validity $validity ms");
            }
            return null;
        case 'redlock-release':
            return $driver->redlockRelease($args[0]);
        case 'took-between':
            if (!((int) $args[0] <= $state['took'] && $state['took'] <= (int) $args[1])) {
                throw new Failed(sprintf('took %d ms', $state['took']));
            }
            return null;
    }
    throw new Exception("unknown step $verb");
}

/** Whether the server of an `INFO server` reply holds a grant's reply for its replicas
 *  itself (`REPLICAS n`): Redis 7.2+ and every Valkey. */
function serverWaits(string $info): bool
{
    if (strpos($info, 'valkey_version:') !== false) {
        return true;
    }
    preg_match('/redis_version:([0-9.]+)/', $info, $m);
    return version_compare($m[1] ?? '0', '7.2.0', '>=');
}

/** How many calls of `$command` an `INFO commandstats` reply counts. */
function callsOf($info, string $command): int
{
    preg_match('/^cmdstat_' . preg_quote(strtolower($command), '/') . ':calls=(\d+)/m', (string) $info, $m);
    return (int) ($m[1] ?? 0);
}

/** Server 3 a replica of master 0 again, in sync with master 0's flush. */
function attachReplica(Driver $driver, array $ports): void
{
    if (count($ports) < 4) {
        return;
    }
    $driver->server(3, ['REPLICAOF', '127.0.0.1', (string) $ports[0]]);
    $deadline = microtime(true) + 15;
    // A write made now, acknowledged: the replica streams from master 0.
    while ($driver->server(0, ['SET', 'conformance:synced', '1']) === null
        || $driver->server(0, ['WAIT', '1', '100']) !== 1) {
        if (microtime(true) > $deadline) {
            throw new RuntimeException('the replica of master 0 did not catch up');
        }
    }
}

function runScenario(array $scenario, array $ports, array $pids): string
{
    $driver = new Driver($ports, $pids);
    $state = ['frozen' => [], 'took' => 0.0, 'expected' => null];
    try {
        for ($i = 0; $i < 3; $i++) {
            $driver->server($i, ['FLUSHALL']);
        }
        attachReplica($driver, $ports);
        // `[7.0: outcome]`: the outcome where the server cannot wait for its replicas
        // itself (Redis 7.0), and the package waits.
        $waitsItself = !serverWaits((string) $driver->server(0, ['INFO', 'server']));
        foreach ($scenario['steps'] as $s) {
            $expected = $s['overrides']['php'] ?? ($waitsItself ? ($s['overrides']['7.0'] ?? null) : null) ?? $s['expected'];
            $state['expected'] = $expected;
            $started = microtime(true);
            try {
                $got = step($driver, $s['words'], $state);
            } catch (Failed $e) {
                return "FAIL {$scenario['name']}: {$s['text']}: {$e->getMessage()}";
            } catch (Throwable $e) {
                $got = get_class($e) . ': ' . $e->getMessage();
            }
            $state['took'] = (microtime(true) - $started) * 1000;
            if ($expected !== null && !($got !== null && matches($got, $expected))) {
                return "FAIL {$scenario['name']}: {$s['text']}: expected $expected, got $got";
            }
        }
        return "ok {$scenario['name']}";
    } finally {
        foreach (array_keys($state['frozen']) as $index) {
            $driver->signal($index, false);
        }
        $driver->close();
    }
}

$ports = array_map('intval', explode(',', getenv('CONFORMANCE_PORTS')));
$pids = array_map('intval', explode(',', getenv('CONFORMANCE_PIDS')));
$failed = 0;
foreach (parseScenarios($argv[1]) as $scenario) {
    $missing = array_values(array_diff($scenario['needs'], FEATURES));
    if ($missing !== []) {
        echo "skip {$scenario['name']}: the php package has no {$missing[0]}\n";
        continue;
    }
    try {
        $line = runScenario($scenario, $ports, $pids);
    } catch (Throwable $e) {
        $line = "FAIL {$scenario['name']}: " . get_class($e) . ': ' . $e->getMessage();
    }
    if (str_starts_with($line, 'FAIL')) {
        $failed++;
    }
    echo str_replace("\n", ' | ', $line), "\n";
}
exit($failed > 0 ? 1 : 0);
