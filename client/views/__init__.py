"""How the client shows what the registry, the plug-ins and the runs say, shared by the CLI's
commands and by ``sealbench demo`` (which prints what the commands print): the results console
and its tables (:mod:`~sealbench.client.views.table`), the leaderboard, a plug-in's result
columns and the account of each step (:mod:`~sealbench.client.views.render`). Rendering only:
every value comes from the library. A room of the client above the runs, below the demo and the
CLI.
"""
