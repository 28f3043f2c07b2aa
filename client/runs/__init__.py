"""Confidential runs: build a run specification, launch it on a TEE backend, retry, resume and
report (one run or a benchmark's batch), and open its result as the data owner.
"""
