"""The data stage: the vendored household data set (source), household records (households)
and price buckets with their seeded weighted samples (buckets).
"""
