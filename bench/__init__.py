"""The benchmarks, run from the repository root as modules: `python -m bench.s3_bench`."""
