"""The BraTS brain-tumour segmentation benchmark: data contract, synthetic data, preparation,
metrics (legacy and lesion-wise, BraTS 2023 rules), reference ONNX model and inference.

What the enclave needs::

    from sealbench.benchmarks.brats import (
        load_definition, load_model_bytes, case_files_from_manifest_paths,
        load_case_from_bytes, OnnxSegmenter, score_or_fail, aggregate)
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
from .definition import BenchmarkDefinition, ModelReference, load_definition, load_model_bytes
from .errors import (
    BenchmarkError,
    CaseContractError,
    CaseError,
    CaseFormatError,
    InferenceError,
    InvalidPredictionError,
    ModelContractError,
    ModelDigestMismatchError,
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
from .prepare import CaseRejection, NoValidCasesError, PreparationReport, prepare_dataset
from .summary import MetricStats, PublicSummary, aggregate

__all__ = [
    "BRATS2021_LABELS",
    "BRATS2023_LABELS",
    "BRATS_2023_GLI",
    "BRATS_2023_GLI_METRICS",
    "REGIONS",
    "BenchmarkDefinition",
    "BenchmarkError",
    "BratsContract",
    "Case",
    "CaseContractError",
    "CaseError",
    "CaseFailure",
    "CaseFormatError",
    "CaseRejection",
    "CaseResult",
    "CaseScores",
    "InferenceError",
    "InvalidPredictionError",
    "LabelMap",
    "MetricStats",
    "MetricsSpec",
    "ModelContractError",
    "ModelContractReport",
    "ModelDigestMismatchError",
    "ModelReference",
    "NoValidCasesError",
    "OnnxSegmenter",
    "PreparationError",
    "PreparationReport",
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
    "load_definition",
    "load_model_bytes",
    "prepare_dataset",
    "prepared_case_path",
    "score_case",
    "score_or_fail",
]
