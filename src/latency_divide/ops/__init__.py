"""The operations around the pipeline: running a sweep and keeping its data.

admission (a trial's share of the host's CPU), progress and sweeptiming (how a sweep goes
and where its time went), workflow (the trial rule's job), dvcstore, verify and
publish (the DVC-tracked raw data: read, checked, published) and migrate (format-1 trials
into the definition layout).
"""
