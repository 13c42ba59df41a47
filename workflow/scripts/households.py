"""Snakemake script (rule households): every household record as JSON."""
import logging

from latency_divide.data.buckets import Bucket
from latency_divide.data.households import write_record

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
buckets = [Bucket.from_dict(b) for b in snakemake.params.buckets]
for h, out in zip(snakemake.params.household_ids, snakemake.output.records):
    write_record(h, out, buckets, snakemake.input.data)
logging.info("wrote %d household records", len(snakemake.output.records))
