"""Snakemake script (rule households): every household record as JSON, and their table."""
import logging

from latency_divide.buckets import Bucket
from latency_divide.households import write_record, write_table

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
buckets = [Bucket.from_dict(b) for b in snakemake.params.buckets]
records = [write_record(h, out, buckets, snakemake.input.data)
           for h, out in zip(snakemake.params.household_ids, snakemake.output.records)]
write_table(records, snakemake.output.table)
logging.info("wrote %d household records and %s", len(records), snakemake.output.table)
