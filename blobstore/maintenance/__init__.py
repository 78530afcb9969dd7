"""The maintenance job: ledger GC, compaction and lifecycle, on Spark."""
