"""Bulk scoring of files (`attserve score`): JSONL, CSV or Parquet rows through the service's
engine in-process (scoring.files), or on a Ray cluster (scoring.on_ray). Outside service/: it
reads Parquet (pyarrow) and, on Ray, pickles, which the serving image never loads."""
