# Stage 1: household records (the data set's values in our units) and their table.


rule household:
    input:
        data=HOUSEHOLD_DATA,
    output:
        record="results/households/{household}.json",
    params:
        household_id=lambda wildcards: int(wildcards.household),
        buckets=[b.to_dict() for b in CFG.buckets],
    conda:
        "../envs/workflow.yaml"
    log:
        "logs/household/{household}.log",
    script:
        "../workflow/scripts/household.py"


rule households_table:
    input:
        records=expand("results/households/{household}.json", household=HOUSEHOLDS),
    output:
        table="results/tables/households.parquet",
    conda:
        "../envs/workflow.yaml"
    log:
        "logs/households_table/households_table.log",
    script:
        "../workflow/scripts/households_table.py"
