"""The tiny2dseg benchmark plug-in for sealbench."""
