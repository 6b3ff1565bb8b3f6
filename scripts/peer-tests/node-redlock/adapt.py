# Adapts node-redlock's tests to this machine and to the module: hosts -> loopback ports
# (env), and GET of a lock's value (the recipe's internals) -> lockGet (harness.js).
import re, sys
src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()
hosts = {
  'redis-single-instance': 'SINGLE', 'redis-single-cluster-1': 'SINGLE_CLUSTER',
  'redis-multi-instance-a': 'MULTI_A', 'redis-multi-instance-b': 'MULTI_B', 'redis-multi-instance-c': 'MULTI_C',
  'redis-multi-cluster-a-1': 'MULTI_CLUSTER_A', 'redis-multi-cluster-b-1': 'MULTI_CLUSTER_B', 'redis-multi-cluster-c-1': 'MULTI_CLUSTER_C',
}
n = 0
for host, env in hosts.items():
    s, k = re.subn(r'\{ host: "%s" \}' % re.escape(host), '{ host: "127.0.0.1", port: Number(process.env.%s) }' % env, s)
    n += k
s, k = re.subn(r'await (redis[ABC]?)\.get\(', r'await lockGet(\1, ', s)
s = s.replace('import Redlock, { ExecutionError, ResourceLockedError } from "./index.js";',
              'import Redlock, { ExecutionError, ResourceLockedError } from "./index.js";\nimport { lockGet } from "./harness.js";')
open(dst, 'w').write(s)
print(f"{src}: {n} hosts, {k} GETs adapted")
