"""The registry as the client talks to it: the typed API client, profiles, the local embedded
registry, and the checks of its transparency log (receipts, witnesses).
"""
