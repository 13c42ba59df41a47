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


# A population sample (households.population_sample, docs/population.md): the draw itself,
# beside the households table. One row per household of the data set: drawn (with its rank),
# not drawn, or excluded before the draw with the reason. Only for such a config.
if CFG.population is not None:

    rule population_sample:
        input:
            data=HOUSEHOLD_DATA,
        output:
            table="results/tables/population_sample.parquet",
        params:
            population=CFG.population.to_dict(),
            seed=CFG.seed,
            buckets=[{"name": b.name, "min": b.min_usd, "max": b.max_usd} for b in CFG.buckets],
            qfactor=CFG.qfactor,
        log:
            "logs/population_sample/population_sample.log",
        localrule: True
        conda:
            "../envs/workflow.yaml"
        script:
            "../workflow/scripts/population_sample.py"

    TARGET_FUNCTIONS.append(lambda: ["results/tables/population_sample.parquet"])
