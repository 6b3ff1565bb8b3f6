/**
 * A client of either library: an ioredis `Redis` (Sentinel-managed too) or `Cluster`, or
 * a connected node-redis client, client pool (`createClientPool`), cluster
 * (`createCluster`) or sentinel (`createSentinel`).
 */
export type Client =
  | { call(command: string, ...args: string[]): Promise<unknown>; duplicate(...args: never[]): unknown }
  | { sendCommand(args: string[]): Promise<unknown>; duplicate(): unknown }
  | { sendCommand(args: string[]): Promise<unknown>; execute(...task: never[]): Promise<unknown> }
  | {
      sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
      getSlotMaster(slot: number): unknown;
      duplicate(): unknown;
    }
  | {
      sendCommand(isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
      acquire(): Promise<unknown>;
      use(...args: never[]): unknown;
    };

export interface AcquireSettings {
  /** Wait up to this many ms for a busy lock, in the server's queue (0: without limit). */
  wait?: number;
  /** Bind the lock to the connection: released this many ms after it closes. */
  session?: number;
  /** Your own token (1 to 256 bytes); a random 128-bit one by default. */
  token?: string;
  /** A reader of a read/write lock: beside other readers, never beside a writer. */
  shared?: boolean;
  /** One of at most this many holders: a counting semaphore (1 to 1,000,000). */
  limit?: number;
  /** A public value published with the grant (0 to 4096 bytes): the leader's address. */
  value?: string;
  /**
   * How many replicas must acknowledge a grant (or an extend) before it counts: 'auto'
   * (the default) is 1 when the master has a replica online, none without; 0 turns it off.
   */
  replicas?: 'auto' | number;
  /** How long the replicas' acknowledgement is waited for, in ms (default: a tenth of
   *  the duration, at most 1000). */
  replicasTimeout?: number;
  /** Wait with WAITAOF: the master's own fsync too (Redis 7.2+, Valkey 8+, appendonly). */
  fsync?: boolean;
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
/** Too few replicas acknowledged a grant in time: it was released, nothing is held. */
export declare class NotReplicatedError extends ResourceLockedError {
  acked: number;
  required: number;
  /** The master had too few replicas online for an explicit `replicas`: nothing was sent. */
  refused: boolean;
}
/** One Redlock attempt's votes, as node-redlock reports them. */
export interface ExecutionStats {
  readonly membershipSize: number;
  readonly quorumSize: number;
  /** The clients (masters) that granted. */
  readonly votesFor: Set<Client>;
  /** The clients that did not, each with its reason: a ResourceLockedError for a busy
   *  key, else the client library's error. */
  readonly votesAgainst: Map<Client, Error>;
}

export declare class ExecutionError extends LockError {
  /** Each attempt's votes. */
  readonly attempts: ReadonlyArray<Promise<ExecutionStats>>;
}

export declare class Lock {
  readonly locker: Locker;
  /** The resource as you named it. */
  readonly resource: string;
  /** The key on the server (with the client's key prefix). */
  readonly key: string;
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
  /** Runs a command fenced by the lock (LOCK.DO); LockLostError when no longer held. */
  do(...args: Array<string | number>): Promise<unknown>;
}

export interface LockInfo {
  ttl: number;
  fence: number;
  acquired: number;
  waiters: number;
  session?: number;
  connected?: number;
  holders?: number;
  limit?: number;
  mode?: string;
  /** The published value (`VALUE v` on the grant), null when none. */
  value?: string | null;
  [field: string]: number | string | null | undefined;
}

/** Every key of one `Locker#lockAll`, held by one token with a fence per resource. */
export declare class MultiLock {
  readonly resources: string[];
  readonly keys: string[];
  readonly value: string;
  readonly fences: number[];
  duration: number;
  expiration: number;
  release(): Promise<void>;
  extend(duration: number): Promise<MultiLock>;
}

export declare class Locker {
  constructor(client: Client, settings?: AcquireSettings);
  lockAll(
    resources: string[],
    duration: number,
    settings?: Pick<AcquireSettings, 'wait' | 'session' | 'token' | 'shared'>,
  ): Promise<MultiLock>;
  readonly connection: { send(args: Array<string | number>): Promise<unknown> };
  acquire(resource: string | [string], duration: number, settings?: AcquireSettings): Promise<Lock>;
  readLock(resource: string | [string], duration: number, settings?: AcquireSettings): Promise<Lock>;
  writeLock(resource: string | [string], duration: number, settings?: AcquireSettings): Promise<Lock>;
  semaphore(resource: string | [string], permits: number, duration: number, settings?: AcquireSettings): Promise<Lock>;
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

/** node-redlock's settings. */
export interface Settings {
  driftFactor?: number;
  /** Attempts after the first (default 10); -1 retries forever. With one client each
   *  attempt waits in the server for the delay before the next one. */
  retryCount?: number;
  retryDelay?: number;
  retryJitter?: number;
  automaticExtensionThreshold?: number;
  /** Ours (node-redlock has none): ms each master may take to answer before it counts
   *  as a vote against (default: a tenth of the duration, at most 500). */
  masterTimeout?: number;
  /** Each master's grant waits for its own replicas (see AcquireSettings.replicas). */
  replicas?: 'auto' | number;
  /** Default: half the master timeout. */
  replicasTimeout?: number;
  fsync?: boolean;
}

export declare class RedlockLock {
  readonly redlock: Redlock;
  readonly resources: string[];
  readonly value: string;
  readonly attempts: ReadonlyArray<Promise<ExecutionStats>>;
  /** Until when the lock may be relied on (ms since the epoch). */
  expiration: number;
  /** The duration (ms) it was taken or last extended for. */
  readonly duration: number;
  /** Each granting master's fence (for several resources, its array of fences). */
  readonly fences: Array<number | number[]>;
  /** With one client, the fencing token; undefined across independent masters. */
  readonly fence: number | undefined;
  release(): Promise<void>;
  extend(duration: number): Promise<RedlockLock>;
}

/** node-redlock's Redlock: one client (fenced, waiting in the server) or several masters. */
export declare class Redlock {
  constructor(clients: Iterable<Client>, settings?: Settings);
  readonly clients: Client[];
  readonly quorum: number;
  on(event: 'error', listener: (error: unknown) => void): this;
  acquire(resources: string[] | string, duration: number, settings?: Settings): Promise<RedlockLock>;
  release(lock: RedlockLock): Promise<void>;
  extend(lock: RedlockLock, duration: number): Promise<RedlockLock>;
  using<T>(resources: string[] | string, duration: number, routine: (signal: LockSignal) => Promise<T>): Promise<T>;
  using<T>(
    resources: string[] | string,
    duration: number,
    settings: Settings,
    routine: (signal: LockSignal) => Promise<T>,
  ): Promise<T>;
}

export default Redlock;

/** A leader as followers see it: its term (terms only grow) and published value. */
export interface Leader {
  term: number;
  value: string | null;
}

export interface ElectionSettings {
  /** How long a leader keeps its term without an extend, in ms (default 30000). */
  ttl?: number;
  /** How long after a leader's connection closes the next is elected, in ms (default 5000). */
  lockDelay?: number;
}

export declare class Leadership {
  /** The term: send it with every write made as the leader. */
  readonly term: number;
  /** True once the term is known to be lost: stop acting as the leader. */
  readonly lost: boolean;
  /** Publishes `value` in place of the last one, same term; LockLostError if lost. */
  proclaim(value: string): Promise<void>;
  /** Resigns: the next candidate is elected at once; false if it was already lost. */
  resign(): Promise<boolean>;
}

/** Leader election on one lock: campaign, proclaim, resign, leader, observe. */
export declare class Election {
  constructor(client: Client | Locker, name: string, settings?: ElectionSettings);
  readonly locker: Locker;
  campaign(value: string, settings?: { timeout?: number }): Promise<Leadership | null>;
  leader(): Promise<Leader | null>;
  /** Every change of leader after `term`: a Leader, or null when nobody leads. */
  observe(term?: number): AsyncGenerator<Leader | null, void, undefined>;
}
