"""Snakemake script (rule linkplans): each household's link plan as JSON."""
import logging

from latency_divide.links.plan import write_linkplan
from latency_divide.testbed.local import planned_delay_mechanism

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
mechanism = planned_delay_mechanism(snakemake.params.delay)
for record, out in zip(snakemake.input.records, snakemake.output.plans):
    plan = write_linkplan(record, out, snakemake.params.qfactor, mechanism,
                          snakemake.params.buffer_model)
    logging.info("link plan for %s (delay %s -> %s): %s", plan.household_id,
                 snakemake.params.delay, mechanism, plan)
