<?php

declare(strict_types=1);

namespace RedisLock;

/**
 * Too few replicas acknowledged a grant (or an extend) in time (`$replicas` of
 * RedisLock): an acquire's grant was released at once and nothing is held. `$acked` of
 * `$required` did; `$refused` is true when the master had too few replicas online for an
 * explicit number, so nothing was sent.
 */
class NotReplicatedException extends LockException
{
    /** @var int */
    public $acked;
    /** @var int */
    public $required;
    /** @var bool */
    public $refused;

    public function __construct(string $message, int $acked, int $required, bool $refused)
    {
        parent::__construct($message);
        $this->acked = $acked;
        $this->required = $required;
        $this->refused = $refused;
    }
}
