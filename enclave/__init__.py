"""The workload that runs inside the TEE: attest, obtain credentials, unwrap keys, stream-decrypt,
verify, segment, score, seal the results and attest them."""
