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
