"""The contract between every party, on the ground floor: the run specification, the operator-input
table, the result format, the workload identity and the benchmark pin. It imports nothing of
sealbench but :mod:`sealbench.crypto`, so every other package (the enclave, the registry, the
platforms, the client) can depend on it and none of them on each other for it.
"""
