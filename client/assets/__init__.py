"""An asset owner's library: prepare or synthesise a dataset, export a model, seal either into the
owner's bucket, the result key, and the key grants that follow the registry's approvals.
"""
