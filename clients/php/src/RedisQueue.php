<?php

declare(strict_types=1);

namespace RedisLock;

use Redis;
use RedisCluster;

/**
 * The RedisQueue of the PHP articles: a delayed task queue on the sorted set
 * `Queue:<name>`, each task's score the unix time (seconds) from which it is due. Every
 * step that reads and writes the set runs under the RedisLock `Queue:<name>` (key
 * `Lock:Queue:<name>`), waiting up to `$timeout` seconds for another worker's step, so
 * two workers never take the same task.
 *
 * - `enqueue($name, $id, $timeout = 10, $afterInterval = 0)`: queues `$id` (or each id
 *   of an array) due `$afterInterval` seconds from now; an id already queued keeps its
 *   place (it is never moved).
 * - `dequeue($name, $id, $score, $timeout = 10)`: removes `$id` if its score is still
 *   `$score` (the one `top` or `pop` gave).
 * - `pop($name, $count = 1, $timeout = 10)`: takes up to `$count` due tasks off the
 *   queue, oldest first, as `['id' => ..., 'score' => ...]` pairs: one pair, or false,
 *   when `$count` is 1.
 * - `top($name, $count = 1)`: the same, left queued.
 *
 * The steps that take the lock answer false (pop with `$count` over 1: []) when it
 * stayed busy for `$timeout` seconds.
 *
 * Bad input is answered as the articles' queue answers it, before any command: false
 * from `enqueue` (an empty name, no id or an empty one, a `$timeout` that is not a
 * number above 0, a negative delay) and `dequeue` (an empty name or id, a score that is
 * not a number); [] from `pop` and `top` (an empty name, a `$count` under 1).
 */
class RedisQueue
{
    /** @var Redis|RedisCluster */
    private $redis;
    /** @var RedisLock */
    private $lock;

    /**
     * @param Redis|RedisCluster|array<string, mixed>|null $param a connection, or the
     *   articles' config array (see Connection)
     */
    public function __construct($param = null, ?RedisLock $lock = null)
    {
        $this->redis = Connection::open($param);
        $this->lock = $lock ?? new RedisLock($this->redis);
    }

    /**
     * @param string|int|list<string|int> $id
     * @param int|float $timeout
     */
    public function enqueue(string $name, $id, $timeout = 10, int $afterInterval = 0): bool
    {
        $ids = array_map('strval', is_array($id) ? array_values($id) : [$id]);
        if ($name === '' || $ids === [] || in_array('', $ids, true) || !self::positive($timeout)
            || $afterInterval < 0) {
            return false;
        }
        return $this->locked($name, $timeout, function () use ($name, $ids, $afterInterval): bool {
            $args = [$this->key($name), ['NX']];
            foreach ($ids as $item) {
                array_push($args, time() + $afterInterval, $item);
            }
            $this->redis->zAdd(...$args);
            return true;
        }) ?? false;
    }

    /**
     * @param string|int $id
     * @param int|float $score
     * @param int|float $timeout
     */
    public function dequeue(string $name, $id, $score, $timeout = 10): bool
    {
        if ($name === '' || (string) $id === '' || !is_int($score) && !is_float($score)) {
            return false;
        }
        return $this->locked($name, $timeout, function () use ($name, $id, $score): bool {
            $current = $this->redis->zScore($this->key($name), (string) $id);
            return $current !== false && (float) $current === (float) $score
                && $this->redis->zRem($this->key($name), (string) $id) === 1;
        }) ?? false;
    }

    /**
     * @param int|float $timeout
     * @return array{id: string, score: int|float}|false|list<array{id: string, score: int|float}>
     */
    public function pop(string $name, int $count = 1, $timeout = 10)
    {
        if ($name === '' || $count < 1) {
            return [];
        }
        $taken = $this->locked($name, $timeout, function () use ($name, $count): array {
            $due = $this->due($name, $count);
            if ($due !== []) {
                $this->redis->zRem($this->key($name), ...array_column($due, 'id'));
            }
            return $due;
        }) ?? [];
        return $count === 1 ? ($taken[0] ?? false) : $taken;
    }

    /** @return array{id: string, score: int|float}|false|list<array{id: string, score: int|float}> */
    public function top(string $name, int $count = 1)
    {
        if ($name === '' || $count < 1) {
            return [];
        }
        $due = $this->due($name, $count);
        return $count === 1 ? ($due[0] ?? false) : $due;
    }

    /**
     * Up to `$count` tasks due now, oldest first (ties by id).
     *
     * @return list<array{id: string, score: int|float}>
     */
    private function due(string $name, int $count): array
    {
        if ($count < 1) {
            return [];
        }
        $scores = $this->redis->zRangeByScore($this->key($name), '-inf', (string) time(), [
            'withscores' => true,
            'limit' => [0, $count],
        ]);
        $due = [];
        foreach ((array) $scores as $id => $score) {
            $whole = (float) $score === floor((float) $score);
            $due[] = ['id' => (string) $id, 'score' => $whole ? (int) $score : (float) $score];
        }
        return $due;
    }

    /**
     * Runs `$step` holding the queue's lock; null if the lock stayed busy.
     *
     * @param int|float $timeout
     * @return mixed
     */
    private function locked(string $name, $timeout, callable $step)
    {
        $lockName = 'Queue:' . $name;
        if (!$this->lock->lock($lockName, $timeout, 10)) {
            return null;
        }
        try {
            return $step();
        } finally {
            $this->lock->unlock($lockName);
        }
    }

    /** @param mixed $seconds */
    private static function positive($seconds): bool
    {
        return (is_int($seconds) || is_float($seconds)) && $seconds > 0;
    }

    private function key(string $name): string
    {
        return 'Queue:' . $name;
    }
}
