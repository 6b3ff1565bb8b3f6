"""The fault harness (docs/faults.md): a master, two replicas and three Sentinels on their
own loopback addresses, the module's workers and the SET NX + Lua recipe's beside them,
nemeses (partitions, pauses, crashes, clock jumps), and a checker that counts what each
fault did to each system.

  python3 -m faults --server PATH [--nemeses a,b,...|all] [--mixed N] [--seed N] ...

(from the repository's root; `--help` lists every option). The parts, one job each:

- `options.py`: the run's options, typed (`Options`);
- `run.py`: the run from start to report (`Run`), and the sweep after killed runs;
- `topology.py`: the servers and Sentinels; `net.py`: partitions; `clock.py` and
  `clockshim.c`: clock jumps;
- `workers.py`: the worker processes, and what each holds now (`state.py`);
- `phases.py`: which nemeses act when, and waiting for the servers to settle;
- `nemesis.py`: the faults; `worker.py`: one client of either system;
- `results.py`: the history, the data and the store read back; `checker.py`: the counts;
  `report.py`: the Markdown report; `store.py`: the fenced store; `resp.py`: a RESP
  client bound to its own address.

`tests/` holds the checker's own tests, on recorded histories."""
