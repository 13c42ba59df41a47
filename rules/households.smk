# Stage 1: household records (the data set's values in our units) and their table, in one job
# (one Python start-up for all households; a record is a row lookup).


rule households:
    input:
        data=HOUSEHOLD_DATA,
    output:
        records=household_targets(),
        table="results/tables/households.parquet",
    params:
        household_ids=[int(h) for h in HOUSEHOLDS],
        buckets=[b.to_dict() for b in CFG.buckets],
    conda:
        "../envs/workflow.yaml"
    log:
        "logs/households/households.log",
    script:
        "../workflow/scripts/households.py"
