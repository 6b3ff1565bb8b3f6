<?php

declare(strict_types=1);

namespace RedisLock;

/** An error reply from the server (WRONGTYPE, a bad argument), or a bad argument here. */
class LockException extends \RuntimeException
{
}
