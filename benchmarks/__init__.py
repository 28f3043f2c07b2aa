"""Benchmark definitions. `brats`: the brain-tumour segmentation benchmark (data contract,
preparation, synthetic data, metrics, reference model and ONNX Runtime inference)."""
