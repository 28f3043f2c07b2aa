"""Pure cryptography for sealbench: streaming AEAD, envelope (DEK wrapping), HPKE result sealing,
canonical manifests and digests, attestation-token verification. No network, no cloud SDKs."""
