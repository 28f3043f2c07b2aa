"""The evaluation and aggregator images: build them reproducibly from a checkout
(:mod:`~sealbench.client.images.build`) and say which sources an image was built from
(:mod:`~sealbench.client.images.source`). A room of the client below the runs: it imports no
other room.
"""
