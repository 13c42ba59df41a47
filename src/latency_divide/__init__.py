"""latency-divide: a reproducible 'Tackling the latency divide with Copa' experiment."""

__version__ = "0.1.0"

#: Prefix of every namespace, interface, temporary directory and process tag we create.
PREFIX = "ld-"

#: Version of the on-disk trial format (meta.json). 2: meta.json records the trial's
#: definition and its id (the raw path's first component); 1 (the first published run) did not.
FORMAT_VERSION = 2
#: Trial formats the analysis reads.
READABLE_FORMATS = (1, 2)
