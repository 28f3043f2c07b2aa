"""tiny2dseg: a 2D binary segmentation benchmark plug-in for sealbench (a test of the seam)."""
