"""The boundary to key management, object storage and identity federation: Google Cloud
implementations (Cloud KMS, Cloud Storage, google-auth external_account credentials, policy
writer) and local ones (a filesystem bucket)."""
