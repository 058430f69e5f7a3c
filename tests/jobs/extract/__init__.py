"""The gate and extraction job (SPEC §3), one module of tests per part of `jobs.extract`."""
