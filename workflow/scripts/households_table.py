"""Snakemake script (rule households_table): the records as one Parquet table."""
import logging

from latency_divide.data.households import read_record, write_table

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
df = write_table([read_record(p) for p in snakemake.input.records], snakemake.output.table)
logging.info("wrote %d households to %s", len(df), snakemake.output.table)
