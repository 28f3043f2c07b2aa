"""The BraTS brain-tumour segmentation benchmark: data contract, synthetic data, preparation,
metrics (legacy and lesion-wise, BraTS 2023 rules), reference ONNX model and inference.

What the enclave needs::

    from sealbench.benchmarks.brats import (
        BRATS_2023_GLI, BRATS_2023_GLI_METRICS, load_case_from_bytes,
        case_files_from_manifest_paths, OnnxSegmenter, score_or_fail, aggregate)
"""

from .cases import (
    Case,
    case_files_from_manifest_paths,
    decode_nifti,
    encode_nifti,
    load_case,
    load_case_from_bytes,
    prepared_case_path,
)
from .contract import (
    BRATS2021_LABELS,
    BRATS2023_LABELS,
    BRATS_2023_GLI,
    REGIONS,
    BratsContract,
    LabelMap,
    Region,
)
from .errors import (
    BenchmarkError,
    CaseContractError,
    CaseError,
    CaseFormatError,
    InferenceError,
    InvalidPredictionError,
    ModelContractError,
    PreparationError,
)
from .inference import OnnxSegmenter, Segmenter
from .metrics import (
    BRATS_2023_GLI_METRICS,
    CaseFailure,
    CaseResult,
    CaseScores,
    MetricsSpec,
    RegionScores,
    score_case,
    score_or_fail,
)
from .model_contract import ModelContractReport, check_model_contract
from .summary import MetricStats, PublicSummary, aggregate

__all__ = [
    "BRATS2021_LABELS",
    "BRATS2023_LABELS",
    "BRATS_2023_GLI",
    "BRATS_2023_GLI_METRICS",
    "REGIONS",
    "BenchmarkError",
    "BratsContract",
    "Case",
    "CaseContractError",
    "CaseError",
    "CaseFailure",
    "CaseFormatError",
    "CaseResult",
    "CaseScores",
    "InferenceError",
    "InvalidPredictionError",
    "LabelMap",
    "MetricStats",
    "MetricsSpec",
    "ModelContractError",
    "ModelContractReport",
    "OnnxSegmenter",
    "PreparationError",
    "PublicSummary",
    "Region",
    "RegionScores",
    "Segmenter",
    "aggregate",
    "case_files_from_manifest_paths",
    "check_model_contract",
    "decode_nifti",
    "encode_nifti",
    "load_case",
    "load_case_from_bytes",
    "prepared_case_path",
    "score_case",
    "score_or_fail",
]
