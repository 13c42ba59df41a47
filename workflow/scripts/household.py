"""Snakemake script (rule household): one household record as JSON."""
import logging

from latency_divide.buckets import Bucket
from latency_divide.households import write_record

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
buckets = [
    Bucket(b["name"], b["min"], b["max"], tuple(b["ids"]) if "ids" in b else None, b.get("sample"))
    for b in snakemake.params.buckets
]
h = write_record(snakemake.params.household_id, snakemake.output.record, buckets, snakemake.input.data)
logging.info("household %s: %s", h.unit_id, h)
