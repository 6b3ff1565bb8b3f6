<?php

declare(strict_types=1);

namespace RedisLock;

use Redis;

/**
 * The RedisQueue of the PHP articles: a task queue on a sorted set, highest score first
 * (the score is the priority; equal scores in reverse order of their ids), whose
 * read-and-remove steps are guarded by a RedisLock on the queue's name so that two
 * workers never take the same task.
 *
 * Keys: the sorted set `Queue:<name>`, its lock `Lock:Queue:<name>`.
 */
class RedisQueue
{
    /** @var Redis */
    private $redis;
    /** @var RedisLock */
    private $lock;
    /** @var float */
    private $lockTimeout;

    /**
     * $lockTimeout: how long `pop` waits for another worker's pop to finish (seconds).
     */
    public function __construct(Redis $redis, ?RedisLock $lock = null, float $lockTimeout = 5.0)
    {
        $this->redis = $redis;
        $this->lock = $lock ?? new RedisLock($redis);
        $this->lockTimeout = $lockTimeout;
    }

    /** Adds (or re-scores) task `$id` with priority `$score`; true if it was new. */
    public function enqueue(string $name, string $id, float $score = 0.0): bool
    {
        return $this->redis->zAdd($this->key($name), $score, $id) === 1;
    }

    /** Removes task `$id` without running it; true if it was queued. */
    public function dequeue(string $name, string $id): bool
    {
        return $this->redis->zRem($this->key($name), $id) === 1;
    }

    /**
     * Takes up to `$count` tasks of the highest priority off the queue and returns their
     * ids, highest first: each id goes to exactly one caller. An empty array when the
     * queue is empty; a LockException when another worker's pop holds the queue for
     * longer than the lock timeout.
     *
     * @return list<string>
     */
    public function pop(string $name, int $count = 1): array
    {
        $lockName = 'Queue:' . $name;
        if (!$this->lock->lock($lockName, $this->lockTimeout, 10)) {
            throw new LockException("pop: the queue $name stayed locked for {$this->lockTimeout} s");
        }
        try {
            $ids = $this->top($name, $count);
            if ($ids !== []) {
                $this->redis->zRem($this->key($name), ...$ids);
            }
            return $ids;
        } finally {
            $this->lock->unlock($lockName);
        }
    }

    /**
     * The ids of up to `$count` tasks of the highest priority, highest first, left on
     * the queue.
     *
     * @return list<string>
     */
    public function top(string $name, int $count = 1): array
    {
        if ($count < 1) {
            return [];
        }
        return array_values(array_map('strval', $this->redis->zRevRange($this->key($name), 0, $count - 1)));
    }

    private function key(string $name): string
    {
        return 'Queue:' . $name;
    }
}
