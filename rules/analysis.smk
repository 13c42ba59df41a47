# Stage 4: analysis. Every complete trial directory (its meta.json, from rules/common.smk's
# trial_targets()) -> typed Parquet tables under results/tables/ (TABLE_FILES in common.smk).
# A trial directory that cannot be used is named in the log and left out; none usable is an
# error. Inputs are the meta.json files only: the trial rule's own inputs are `ancient`, so raw
# data restored by DVC (no mtimes kept) re-runs this cheap rule at most, never a trial.


rule analysis_tables:
    input:
        metas=trial_targets(),
    output:
        **TABLE_FILES,
    threads: 2
    conda:
        "../envs/analysis.yaml"
    log:
        "logs/analysis_tables/analysis_tables.log",
    script:
        "../workflow/scripts/build_tables.py"


# One tables job per companion data set present (rules/common.smk, COMPANIONS_PRESENT).
for _c in COMPANIONS_PRESENT:

    rule:
        name:
            f"companion_tables_{_c.name.replace('-', '_')}"
        input:
            metas=_c.metas(),
        output:
            **table_files(_c.root),
        threads: 2
        conda:
            "../envs/analysis.yaml"
        log:
            f"logs/companions/{_c.name}/analysis_tables.log",
        script:
            "../workflow/scripts/build_tables.py"


TARGET_FUNCTIONS.append(analysis_targets)
TARGET_FUNCTIONS.append(companion_targets)


# The percentile view of a population run (households.population_sample; docs/population.md):
# the trials table -> percentiles.parquet (weighted percentiles, change against Cubic, seeded
# household bootstrap; latency_divide.analysis.population). One job per data set that is a
# population run: this run's, and each companion present.
for _root, _cfg, _name in [("results", CFG, "percentiles")] + [
    (_c.root, _c.cfg, f"companion_percentiles_{_c.name.replace('-', '_')}")
    for _c in COMPANIONS_PRESENT
]:
    if _cfg.population is None:
        continue

    rule:
        name:
            _name
        input:
            trials=table_files(_root)["trials"],
        output:
            **percentile_files(_root, _cfg),
        params:
            seed=_cfg.seed,
        conda:
            "../envs/analysis.yaml"
        log:
            f"logs/percentiles/{_name}.log",
        script:
            "../workflow/scripts/percentiles.py"
