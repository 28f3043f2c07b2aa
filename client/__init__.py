"""The `sealbench` command line for every role, the typed registry client, TEE launchers and the
local profile and key store."""
