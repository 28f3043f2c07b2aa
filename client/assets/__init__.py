"""An asset owner's library: prepare or synthesise a dataset, export a model, score files on disk
with a benchmark's plug-in, seal either asset into the owner's bucket, the result key, the key
grants that follow the registry's approvals, and ``doctor``'s checks of the owner's setup.
"""
