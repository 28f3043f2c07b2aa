"""``python -m sealbench.client.cli``: the same as the ``sealbench`` command."""

from sealbench.client.cli import main

main()
