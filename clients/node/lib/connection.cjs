'use strict';
// One interface over the client shapes people connect with: an ioredis `Redis` (a
// Sentinel-managed one too) or `Cluster`, a node-redis client, client pool, cluster or
// sentinel. Arguments go as strings;
// replies come back as the library gives them. A lock's key gets the client's own key
// prefix (ioredis `keyPrefix`), which ioredis does not add to commands it does not know.

const KINDS = {
  // ioredis Redis and Cluster: `call(...args)`; `isCluster` tells them apart.
  ioredis: (client) => typeof client.call === 'function',
  // node-redis cluster: `sendCommand(firstKey, isReadonly, args)`.
  'node-redis-cluster': (client) => typeof client.getSlotMaster === 'function',
  // node-redis sentinel: `sendCommand(isReadonly, args)`; `acquire()` leases a client.
  'node-redis-sentinel': (client) => typeof client.acquire === 'function' && typeof client.use === 'function',
  // node-redis client pool: `execute(client => ...)` lends a client of its own.
  'node-redis-pool': (client) => typeof client.execute === 'function' && typeof client.duplicate !== 'function',
  'node-redis': (client) => typeof client.sendCommand === 'function',
};

// How many MOVED/ASK answers an exchange on a cluster follows before it gives the last
// one back as its reply.
const REDIRECTIONS = 5;

/** The cluster slot of `key` (cluster-key-slot: both clients depend on it). */
function slotOf(key) {
  return require('cluster-key-slot')(key);
}

/** `{ kind: 'MOVED' | 'ASK', address }` when `reply` is a redirection, else null. */
function redirectionOf(reply) {
  if (!(reply instanceof Error)) {
    return null;
  }
  const match = /^(MOVED|ASK) \d+ (\S+)$/.exec(reply.message);
  return match ? { kind: match[1], address: match[2] } : null;
}

class Connection {
  constructor(client) {
    this.client = client;
    this.kind = Object.keys(KINDS).find((kind) => KINDS[kind](client));
    if (this.kind === undefined) {
      throw new TypeError('expected an ioredis Redis or Cluster, or a node-redis client, pool or cluster');
    }
  }

  /** The key `resource` names on the server: with the client's key prefix. */
  keyOf(resource) {
    const options = this.kind === 'ioredis' ? this.client.options || {} : {};
    return `${options.keyPrefix || ''}${resource}`;
  }

  /** Sends `args` (whose second element is the key) and resolves to the reply. */
  send(args) {
    const strings = args.map(String);
    switch (this.kind) {
      case 'ioredis':
        return this.client.call(...strings);
      case 'node-redis-cluster':
        return this.client.sendCommand(strings[1], false, strings);
      case 'node-redis-sentinel':
        return this.client.sendCommand(false, strings);
      default:
        return this.client.sendCommand(strings);
    }
  }

  /** Whether the client spreads keys over nodes (a cluster). */
  get isCluster() {
    return this.kind === 'node-redis-cluster' || (this.kind === 'ioredis' && Boolean(this.client.isCluster));
  }

  /** The server's address as far as the client tells it, for what is learned of it. */
  addressOf() {
    const c = this.client;
    const stream = c.stream;
    if (stream && stream.remoteAddress) {
      return `${stream.remoteAddress}:${stream.remotePort}`;
    }
    const options = c.options || {};
    const socket = options.socket || options;
    return `${socket.host ?? socket.path ?? '?'}:${socket.port ?? ''}`;
  }

  /**
   * On a cluster, the address (`host:port`) of the master the client's slot map names
   * for `key` now; null elsewhere, or while the map is not loaded.
   */
  nodeAddressOf(key) {
    if (!this.isCluster) {
      return null;
    }
    const shard = this.client.slots?.[slotOf(key)];
    if (this.kind === 'ioredis') {
      return shard?.[0] ?? null;
    }
    return shard?.master ? `${shard.master.host}:${shard.master.port}` : null;
  }

  /** The cluster node at `address` as a Connection of its own (no redirections), or null. */
  async nodeAt(address) {
    const c = this.client;
    if (address === null) {
      return null;
    }
    if (this.kind === 'ioredis') {
      const node = c.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === address);
      return node ? new Connection(node) : null;
    }
    const node = c.masters.find((n) => `${n.host}:${n.port}` === address);
    return node ? new Connection(await c.nodeClient(node)) : null;
  }

  /**
   * Sends `commands` in order on one connection, in one round trip (a pipeline), to the
   * node of `key` on a cluster; resolves to their replies, each error as an Error.
   *
   * On a cluster they go on the connection of the master that serves `key`'s slot, all
   * of them: a write and the WAIT after it never land on two nodes. A MOVED answer
   * (the slot moved) makes the client read the slot map again and sends them anew to
   * the node it names; an ASK answer (the slot is moving) sends them to the node named,
   * after ASKING. `commands` may be a function (async) that makes them for each try, for
   * commands that depend on the node (the WAIT a grant needs there).
   */
  exchange(key, commands) {
    if (typeof commands !== 'function' && !this.isCluster) {
      return this.exchangeOnce(key, commands);
    }
    return this.exchangeAcross(key, commands);
  }

  /** `exchange` of commands made for each try, or on a cluster. */
  async exchangeAcross(key, commands) {
    const make = typeof commands === 'function' ? commands : () => commands;
    if (!this.isCluster) {
      return this.exchangeOnce(key, await make());
    }
    let asking = null;
    for (let redirections = 0; ; redirections += 1) {
      const node = await this.nodeAt(asking ?? this.nodeAddressOf(key));
      const sent = await make();
      const replies = node === null
        ? await this.exchangeOnce(key, sent)
        : await node.exchangeOnce(key, asking ? [['ASKING'], ...sent] : sent).then((r) => (asking ? r.slice(1) : r));
      const redirection = replies.map(redirectionOf).find((r) => r !== null);
      if (redirection === undefined || redirections >= REDIRECTIONS) {
        return replies;
      }
      if (redirection.kind === 'ASK') {
        asking = redirection.address;
      } else {
        asking = null;
        await this.reroute(key);
      }
    }
  }

  /** Makes the cluster client read the slot map again (after a MOVED for `key`). */
  async reroute(key) {
    if (this.kind === 'ioredis') {
      await new Promise((resolve) => this.client.refreshSlotsCache(() => resolve()));
      return;
    }
    // node-redis reads the map again when a command of its own meets the MOVED.
    await this.client.sendCommand(key, true, ['EXISTS', key]).catch(() => {});
  }

  /** `exchange` on this connection alone: no redirection followed. */
  async exchangeOnce(key, commands) {
    if (commands.length === 1 && this.kind === 'ioredis' && !this.client.isCluster) {
      // One command needs no pipeline: ioredis's costs a grant more than the command's
      // own round trip on loopback. Its error, reply or connection, is its reply, as a
      // pipeline's result gives it.
      return [await this.client.call(...commands[0].map(String)).catch(errorAsReply)];
    }
    const strings = commands.map((command) => command.map(String));
    const settle = (results) => results.map((r) => (r.status === 'fulfilled' ? r.value : r.reason));
    switch (this.kind) {
      case 'ioredis': {
        const pipeline = this.client.pipeline();
        // On a cluster, a command whose key ioredis knows routes the pipeline to the
        // key's node (it does not know the module's commands' keys).
        const routed = this.client.isCluster ? [['EXISTS', key], ...strings] : strings;
        for (const command of routed) {
          pipeline.call(...command);
        }
        const results = await pipeline.exec();
        const replies = results.map(([error, value]) => error || value);
        return this.client.isCluster ? replies.slice(1) : replies;
      }
      case 'node-redis-cluster':
        return settle(await Promise.allSettled(strings.map((c) => this.client.sendCommand(key, false, c))));
      case 'node-redis-sentinel': {
        // One leased client of the master carries them all, in order.
        const lease = await this.client.acquire();
        try {
          return settle(await Promise.allSettled(strings.map((c) => lease.sendCommand(false, c))));
        } finally {
          lease.release();
        }
      }
      case 'node-redis-pool':
        return this.client.execute(async (client) => settle(await Promise.allSettled(strings.map((c) => client.sendCommand(c)))));
      default:
        return settle(await Promise.allSettled(strings.map((c) => this.client.sendCommand(c))));
    }
  }

  /**
   * `work(connection)` for commands that may block for as long as a wait lasts: on a
   * connection of its own (see `sendBlocking`; a pool's or a sentinel's client lends
   * one), which learns its master's replicas itself.
   */
  async onOwnConnection(work) {
    if (this.kind === 'node-redis-pool' || this.kind === 'node-redis-sentinel') {
      return work(this);
    }
    const copy = await this.duplicate();
    try {
      return await work(copy);
    } finally {
      copy.close();
    }
  }

  /**
   * Sends `args`, which may block for as long as a wait lasts, on a connection of its
   * own (never the shared one, whose other commands would queue behind it) without a
   * command timeout shorter than the wait; resolves to the reply.
   */
  async sendBlocking(args) {
    if (this.kind === 'node-redis-pool') {
      // The pool lends one of its clients for the whole command.
      return this.client.execute((client) => client.sendCommand(args.map(String)));
    }
    if (this.kind === 'node-redis-sentinel') {
      // The sentinel leases a client of the master for the whole command (with its
      // default `masterPoolSize` of 1, its other commands wait meanwhile).
      const lease = await this.client.acquire();
      try {
        return await lease.sendCommand(false, args.map(String));
      } finally {
        lease.release();
      }
    }
    const copy = await this.duplicate();
    try {
      return await copy.send(args);
    } finally {
      copy.close();
    }
  }

  /**
   * A new connection like this one, without a command timeout; `close()` it after. Its
   * connection errors reach the command that was sent on it (a refused connect rejects
   * it), so the copy has an `error` listener of its own: without one, ioredis and
   * node-redis report each refused connect as an unhandled error event besides.
   */
  async duplicate() {
    const c = this.client;
    if (this.kind === 'ioredis') {
      const copy = c.isCluster
        ? c.duplicate([], { redisOptions: { ...(c.options.redisOptions || {}), commandTimeout: undefined } })
        : c.duplicate({ commandTimeout: undefined });
      copy.on('error', quiet);
      return new Connection(copy);
    }
    const copy = c.duplicate();
    copy.on('error', quiet);
    await copy.connect();
    return new Connection(copy);
  }

  close() {
    const c = this.client;
    if (this.kind === 'ioredis') {
      c.disconnect();
    } else if (typeof c.destroy === 'function') {
      c.destroy();
    } else {
      c.close();
    }
  }
}

/** A rejected command's error as its reply (as a pipeline's result gives it). */
function errorAsReply(error) {
  return error;
}

/** The `error` listener of a connection the package opened for itself (see `duplicate`). */
function quiet() {}

module.exports = { Connection, slotOf, errorAsReply };
