"""The evaluation and aggregator images: build them reproducibly from a checkout
(:mod:`~sealbench.client.images.build`), say which sources an image was built from
(:mod:`~sealbench.client.images.source`), and name the image a benchmark pins for a ``--tee``
backend (:mod:`~sealbench.client.images.pinned`). The lowest room of the client: it imports no
other room.
"""
