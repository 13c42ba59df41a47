from latency_divide.progress import mark_run_start
from latency_divide.workflow_glue import RUN_START

# Stage 3: trials. One job per (household, direction, variant, repetition) on the local
# testbed (network namespaces on this host). A trial directory appears only when complete,
# so its meta.json is the job's output; link plans are `ancient` inputs, so a re-generated
# plan (or raw data pulled by DVC, which keeps no mtimes) never re-runs a finished trial.


wildcard_constraints:
    direction="uplink|downlink",
    variant=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    rep=r"\d+",


rule trial:
    input:
        record=ancient("results/households/{household}.json"),
        plan=ancient("results/links/{household}.json"),
        provisioned=ancient(trial_provision_inputs),
    output:
        # protected: Snakemake makes it read-only and refuses to delete it for a re-run, so a
        # measurement is never thrown away by a changed rerun trigger
        meta=protected("results/raw/{household}/{direction}/{variant}/rep{rep}/meta.json"),
    log:
        "logs/trial/{household}/{direction}/{variant}/rep{rep}.log",
    conda:
        "../envs/trials.yaml"
    script:
        "../workflow/scripts/run_trial.py"


# `snakemake trials`: every trial of the run and nothing downstream (dvc.yaml's trials stage).
rule trials:
    input:
        trial_targets(),
    localrule: True


onstart:
    mark_run_start(RUN_START)
