"""Snakemake script (rule linkplan): a household's link plan as JSON."""
import logging

from latency_divide.linkplan import write_linkplan
from latency_divide.topology import planned_delay_mechanism

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
mechanism = planned_delay_mechanism(snakemake.params.delay)
plan = write_linkplan(snakemake.input.record, snakemake.output.plan, snakemake.params.qfactor, mechanism)
logging.info("link plan for %s (delay %s -> %s): %s", plan.household_id, snakemake.params.delay, mechanism, plan)
