// The package's files import one another in one direction: no file of lib/ reaches,
// through the requires of the files it requires, back to itself (a circle is a module that
// Node hands half-loaded to the other side). Reads the files; needs no server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The package's own files each file requires (anywhere in it, lazy requires too). */
function requiresOf(file) {
  const code = readFileSync(file, 'utf8').replace(/^\s*\/\/.*$/gm, '');
  return [...code.matchAll(/require\(\s*'(\.[^']+)'\s*\)/g)]
    .map((match) => resolve(dirname(file), match[1]));
}

/** A circle among `graph`'s files (a Map of file to the files it requires), if any. */
function circle(graph) {
  const done = new Set();
  const visit = (at, path) => {
    const start = path.indexOf(at);
    if (start >= 0) {
      return [...path.slice(start), at];
    }
    if (done.has(at)) {
      return null;
    }
    for (const next of graph.get(at) ?? []) {
      const found = visit(next, [...path, at]);
      if (found) {
        return found;
      }
    }
    done.add(at);
    return null;
  };
  for (const file of graph.keys()) {
    const found = visit(file, []);
    if (found) {
      return found;
    }
  }
  return null;
}

test('no file of the package requires itself through a circle', () => {
  const files = [
    join(root, 'index.cjs'),
    ...readdirSync(join(root, 'lib')).filter((f) => f.endsWith('.cjs')).map((f) => join(root, 'lib', f)),
  ];
  const graph = new Map(files.map((file) => [file, requiresOf(file)]));
  const edges = [...graph.values()].reduce((n, targets) => n + targets.length, 0);
  assert.ok(edges >= 15, `only ${edges} requires read`);
  const found = circle(graph);
  assert.equal(found, null, `a circle: ${(found ?? []).map((f) => f.slice(root.length + 1)).join(' -> ')}`);
});

test('the circle finder finds a planted circle and lazy requires', () => {
  const planted = new Map([['a', ['b']], ['b', ['c']], ['c', ['a']]]);
  assert.deepEqual(circle(planted), ['a', 'b', 'c', 'a']);
  assert.equal(circle(new Map([['a', ['b']], ['b', []]])), null);
});
