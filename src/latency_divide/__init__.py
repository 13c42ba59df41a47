"""latency-divide: a reproducible 'Tackling the latency divide with Copa' experiment."""

__version__ = "0.1.0"

#: Prefix of every namespace, interface, temporary directory and process tag we create.
PREFIX = "ld-"

#: Version of the on-disk formats (trial directories, meta.json, tables).
FORMAT_VERSION = 1
