"""The trial stage: spec (what a trial is, its command lines), run (the one trial sequence,
against testbed.base), layout (the raw layout: where a trial's files are), definition (the
settings that shape a measurement and their id), rawio (compressed logs), meta (host facts
and CPU in meta.json), sweep (a run's trials from its config).
"""
