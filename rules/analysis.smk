# Stage 4: analysis. Every complete trial (its meta.json, or its pack: rules/common.smk's
# trial_inputs()) -> typed Parquet tables under results/tables/ (TABLE_FILES in common.smk).
# A trial directory that cannot be used is named in the log and left out; none usable is an
# error. Inputs are the meta.json files and packs only: the trial rule's own inputs are `ancient`, so raw
# data restored by DVC (no mtimes kept) re-runs this cheap rule at most, never a trial.


rule analysis_tables:
    input:
        trial_inputs(),
    output:
        **TABLE_FILES,
    params:
        metas=TRIAL_METAS,
    threads: 2
    conda:
        "../envs/analysis.yaml"
    log:
        "logs/analysis_tables/analysis_tables.log",
    script:
        "../workflow/scripts/build_tables.py"


# One tables job for every companion data set present (rules/common.smk, COMPANIONS_PRESENT),
# each companion's percentile table too when it is a population run: one Python start-up and
# one import of the analysis for all (a job of its own costs each companion 2-3 s of CPU before
# it reads a trial: bench/bench_reanalysis.py). Outputs are named <companion key>__<table>.
if COMPANIONS_PRESENT:

    rule companion_tables:
        input:
            [f for _c in COMPANIONS_PRESENT for f in _c.inputs()],
        output:
            **{f"{companion_key(_c)}__{k}": v for _c in COMPANIONS_PRESENT
               for k, v in {**table_files(_c.root), **percentile_files(_c.root, _c.cfg)}.items()},
        params:
            # the trials as a digest (Companion.digest), not their list: Snakemake records
            # params beside every output; the job lists them again from the config file
            companions=[{"key": companion_key(_c), "name": _c.name, "seed": _c.cfg.seed,
                         "configfile": _c.configfile, "trials": _c.digest()}
                        for _c in COMPANIONS_PRESENT],
        threads: 2
        conda:
            "../envs/analysis.yaml"
        log:
            "logs/companions/analysis_tables.log",
        localrule: True
        script:
            "../workflow/scripts/companion_tables.py"


TARGET_FUNCTIONS.append(analysis_targets)
TARGET_FUNCTIONS.append(companion_targets)


# The percentile view of this run when it is a population run (households.population_sample;
# docs/population.md): the trials table -> percentiles.parquet (weighted percentiles, change
# against Cubic, seeded household bootstrap; latency_divide.analysis.population). A companion's
# is made by rule companion_tables.
if CFG.population is not None:

    rule percentiles:
        input:
            trials=TABLE_FILES["trials"],
        output:
            **percentile_files(),
        params:
            seed=CFG.seed,
        conda:
            "../envs/analysis.yaml"
        log:
            "logs/percentiles/percentiles.log",
        localrule: True
        script:
            "../workflow/scripts/percentiles.py"
