"""``sealbench demo``: the whole confidential flow on one machine, on the library."""
