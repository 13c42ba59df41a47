# Stage 1: household records (the data set's values in our units), in one job (one Python
# start-up for all households; a record is a row lookup), and their table.


rule households:
    input:
        data=HOUSEHOLD_DATA,
    output:
        records=household_targets(),
    params:
        household_ids=[int(h) for h in HOUSEHOLDS],
        buckets=[b.to_dict() for b in CFG.buckets],
    conda:
        "../envs/workflow.yaml"
    log:
        "logs/households/households.log",
    script:
        "../workflow/scripts/households.py"


# Its own job, with the records as inputs: another household list is another input set, which
# rebuilds the table even where the listed records exist already.
rule households_table:
    input:
        records=household_targets(),
    output:
        table="results/tables/households.parquet",
    conda:
        "../envs/workflow.yaml"
    log:
        "logs/households_table/households_table.log",
    script:
        "../workflow/scripts/households_table.py"
