"""The offline stand-in for the confidential cloud: attestation verifier (OIDC issuer + JWKS),
launcher socket and token file, STS with workload identity pools evaluating real CEL conditions,
KMS REST with IAM bindings, and a storage emulator. Insecure by design; never for production."""
