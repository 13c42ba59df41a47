# Stage 2: link plans (rate, queue, delay and the tc/delay commands) per household, in one job.
# They document the links; a trial computes its own plan from the household and its definition
# (qfactor, buffer_model) and records it in meta.json, so trials do not depend on these files
# (a re-made plan never makes Snakemake re-run a measured trial).


rule linkplans:
    input:
        records=household_targets(),
    output:
        plans=link_targets(),
    params:
        qfactor=CFG.qfactor,
        buffer_model=CFG.buffer_model,
        delay=CFG.testbed.delay,
    conda:
        "../envs/workflow.yaml"
    log:
        "logs/linkplans/linkplans.log",
    script:
        "../workflow/scripts/linkplans.py"
