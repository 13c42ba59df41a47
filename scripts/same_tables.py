#!/usr/bin/env python3
"""Are two results trees' tables the same? For a change that must not change the analysis
(a refactoring): build the tables before and after (e.g. on two fresh clones, `dvc pull` and
`snakemake --cores 1 all`), then

    .venv/bin/python scripts/same_tables.py BEFORE/results AFTER/results

compares every Parquet table under both (tables/, companions/*/tables/): the same files, the
same schema, the same rows and values, the same metadata except the time it was written
(latency_divide.created_at). Prints one line per table; exits 1 if any differs.
"""

import sys
from pathlib import Path

import pyarrow.parquet as pq

VOLATILE = {b"latency_divide.created_at"}


def main(a: Path, b: Path) -> int:
    fa = sorted(p.relative_to(a) for p in a.rglob("*.parquet") if "figures" not in p.parts)
    fb = sorted(p.relative_to(b) for p in b.rglob("*.parquet") if "figures" not in p.parts)
    if fa != fb:
        print(f"different sets of tables: only in {a}: {sorted(set(fa) - set(fb))}; "
              f"only in {b}: {sorted(set(fb) - set(fa))}")
        return 1
    bad = 0
    for rel in fa:
        ta, tb = pq.read_table(a / rel), pq.read_table(b / rel)
        meta_a = {k: v for k, v in (ta.schema.metadata or {}).items() if k not in VOLATILE}
        meta_b = {k: v for k, v in (tb.schema.metadata or {}).items() if k not in VOLATILE}
        same = (ta.schema.remove_metadata() == tb.schema.remove_metadata() and ta.equals(tb)
                and meta_a == meta_b)
        print(f"{'identical' if same else 'DIFFERENT'}  {rel}  ({ta.num_rows} rows)")
        bad += not same
    print(f"{len(fa)} tables, {bad} different")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
