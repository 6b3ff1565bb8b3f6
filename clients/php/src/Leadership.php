<?php

declare(strict_types=1);

namespace RedisLock;

/**
 * One term of leadership, as `Election::campaign` returns it (the other packages'
 * `Leadership`): the term (the fence to send with every write), and what the leader does
 * with it. PHP has no background thread: a leader that runs longer than the TTL calls
 * `refresh()` at least every third of it; false from any call means the term is lost
 * (stop leading), and `isLost()` says so from then on.
 */
final class Leadership
{
    /** @var Commands */
    private $commands;
    /** @var string */
    private $key;
    /** @var string */
    private $token;
    /** @var int */
    private $term;
    /** @var int */
    private $ttlMs;
    /** @var int */
    private $lockDelayMs;
    /** @var bool */
    private $lost = false;

    /** @internal made by Election::campaign */
    /** @var Replicas|null */
    private $replicas;

    public function __construct(Commands $commands, string $key, string $token, int $term, int $ttlMs, int $lockDelayMs, ?Replicas $replicas = null)
    {
        $this->replicas = $replicas;
        $this->commands = $commands;
        $this->key = $key;
        $this->token = $token;
        $this->term = $term;
        $this->ttlMs = $ttlMs;
        $this->lockDelayMs = $lockDelayMs;
    }

    /** The term: the fence to send with every write while leading. */
    public function term(): int
    {
        return $this->term;
    }

    /** True once a call found the term lost, or after `resign()`. */
    public function isLost(): bool
    {
        return $this->lost;
    }

    /** Publishes `$value` in place of the last one, same term; false if the term is lost. */
    public function proclaim(string $value): bool
    {
        if ($this->lost) {
            return false;
        }
        $granted = $this->commands->acquire($this->key, $this->ttlMs, $this->token, null, $this->lockDelayMs, [], $value, $this->replicas);
        if ($granted !== null && $granted[1] === $this->term) {
            return true;
        }
        if ($granted !== null) {
            // The term had ended and the key was free: this took it anew. Give it back.
            $this->commands->release($this->key, $this->token);
        }
        $this->lost = true;
        return false;
    }

    /** Extends the term to the full TTL; false if it is lost (stop leading). */
    public function refresh(): bool
    {
        if ($this->lost) {
            return false;
        }
        if ($this->commands->extend($this->key, $this->token, $this->ttlMs, $this->replicas)) {
            return true;
        }
        $this->lost = true;
        return false;
    }

    /** Resigns: the next candidate is elected at once. False if the term was already lost. */
    public function resign(): bool
    {
        if ($this->lost) {
            return false;
        }
        $this->lost = true;
        return $this->commands->release($this->key, $this->token);
    }
}
