# Stage 2: link plans (rate, queue, delay and the tc/delay commands) per household.


rule linkplan:
    input:
        record="results/households/{household}.json",
    output:
        plan="results/links/{household}.json",
    params:
        qfactor=CFG.qfactor,
        delay=CFG.testbed.delay,
    conda:
        "../envs/workflow.yaml"
    log:
        "logs/linkplan/{household}.log",
    script:
        "../workflow/scripts/linkplan.py"
