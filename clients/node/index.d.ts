/** A connection of either library: an ioredis `Redis` or a connected node-redis client. */
export type Client =
  | { call(command: string, ...args: string[]): Promise<unknown>; duplicate(): unknown }
  | { sendCommand(args: string[]): Promise<unknown>; duplicate(): unknown };

export interface AcquireSettings {
  /** Wait up to this many ms for a busy lock, in the server's queue (0: without limit). */
  wait?: number;
  /** Bind the lock to the connection: released this many ms after it closes. */
  session?: number;
  /** Your own token (1 to 256 bytes); a random 128-bit one by default. */
  token?: string;
}

export interface UsingSettings extends AcquireSettings {
  /** How often `using` extends the lock, in ms (default: a third of the duration). */
  extendEvery?: number;
}

export interface LockSignal extends AbortSignal {
  /** The LockLostError the signal was aborted with (also `reason`). */
  error?: LockLostError;
}

export declare class LockError extends Error {}
export declare class ResourceLockedError extends LockError {}
export declare class LockLostError extends LockError {}

export declare class Lock {
  readonly locker: Locker;
  readonly resource: string;
  /** The token that proves ownership. */
  readonly value: string;
  /** The fencing token: grows with every grant of the key; exact (below 2^53). */
  readonly fence: number;
  readonly duration: number;
  readonly session: number | undefined;
  /** When the lock expires, in ms since the epoch, as far as the client knows. */
  expiration: number;
  release(): Promise<void>;
  extend(duration: number): Promise<Lock>;
}

export interface LockInfo {
  ttl: number;
  fence: number;
  acquired: number;
  waiters: number;
  session?: number;
  connected?: number;
  [field: string]: number | string | undefined;
}

export declare class Locker {
  constructor(client: Client, settings?: AcquireSettings);
  acquire(resource: string | [string], duration: number, settings?: AcquireSettings): Promise<Lock>;
  release(lock: Lock): Promise<void>;
  extend(lock: Lock, duration: number): Promise<Lock>;
  using<T>(resource: string | [string], duration: number, routine: (signal: LockSignal, lock: Lock) => Promise<T>): Promise<T>;
  using<T>(
    resource: string | [string],
    duration: number,
    settings: UsingSettings,
    routine: (signal: LockSignal, lock: Lock) => Promise<T>,
  ): Promise<T>;
  info(resource: string | [string]): Promise<LockInfo | null>;
}
