// The harness's reading of a lock's value, where node-redlock's tests GET the key (the
// recipe's internals): the module never shows a token, so a key holding a lock answers
// with the token (of those this harness saw granted) for which a fenced PING runs.
export const seen = new Set();

export async function lockGet(client, key) {
  const type = await client.type(key);
  if (type === 'none') return null;
  if (type === 'string') return client.get(key);
  const tokens = [...seen];
  const probes = await Promise.all(tokens.map((token) => client.call('LOCK.DO', key, token, 'PING').catch((error) => {
    if (!String(error.message).startsWith('NOTHELD')) throw error;
    return null;
  })));
  const i = probes.indexOf('PONG');
  if (i >= 0) return tokens[i];
  return '(held by a token this harness did not see)';
}
