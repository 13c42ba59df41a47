"""latency-divide: a reproducible 'Tackling the latency divide with Copa' experiment."""

__version__ = "0.1.0"

#: Prefix of every namespace, interface, temporary directory and process tag we create.
PREFIX = "ld-"

#: Version of the on-disk trial format (meta.json). 4: every file but meta.json is packed into
#: one deterministic ``logs.tar.xz`` (trial.rawio), the set-up records (link plan, testbed,
#: host, qdisc dumps: trial.layout.SETUP_KEYS) moved out of meta.json into its ``setup.json``:
#: two files a trial, about three blocks, for a DVC remote that counts whole 4 KiB blocks; 3: meta.json is written compact (no
#: indentation) and queue.jsonl holds only the bottleneck FIFO's bytes, backlog, qlen and drops
#: per sample, its time to the millisecond (the sampler's --fifo); 2:
#: meta.json records the trial's definition and its id (the raw path's first component); 1 (the
#: first published run) did not.
FORMAT_VERSION = 4
#: Trial formats the analysis reads.
READABLE_FORMATS = (1, 2, 3, 4)
