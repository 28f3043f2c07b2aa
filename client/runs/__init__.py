"""Confidential runs: build a run specification, launch it on a TEE backend, retry, resume and
report (one run or a benchmark's batch), open its result as the data owner, and the inbox (the
registry's to-do list merged with this machine's run records).
"""
