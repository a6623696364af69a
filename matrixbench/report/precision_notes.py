"""The report's one line on TF32: the runner keeps the seed's precision flags (runner.precision:
float32 matmuls at "highest", no TF32; cuDNN convolutions allowed TF32) in every cell, for
comparability; on a GPU that has TF32 (compute capability 8.0+), the reader is told it was off."""
MATMUL = "precision.float32_matmul_precision"
AVAILABLE = "precision.tf32_available"
CUDNN = "precision.cudnn_allow_tf32"


def precision_notes(frame):
    """One note where GPU records of a TF32-capable GPU are in ``frame`` (the merged records)."""
    if MATMUL not in frame or AVAILABLE not in frame:
        return []
    gpu = frame[frame[AVAILABLE].fillna(False).astype(bool)]
    if gpu.empty:
        return []
    matmul = sorted(gpu[MATMUL].dropna().astype(str).unique())
    cudnn = sorted(gpu[CUDNN].dropna().astype(bool).unique()) if CUDNN in gpu else []
    convolutions = {(True,): "cuDNN convolutions were allowed TF32", (False,): "cuDNN convolutions were not"}.get(
        tuple(cudnn), "cuDNN's TF32 flag differed between records")
    if matmul == ["highest"]:
        return [f"TF32 was off for float32 matmuls (float32_matmul_precision \"highest\", the seed's flags, in every "
                f"record on a GPU that has TF32; {convolutions}): float32 timings here are full-precision ones, "
                "slower than with TF32 on."]
    return [f"TF32 for float32 matmuls differed between records on a GPU that has TF32 (float32_matmul_precision "
            f"{', '.join(matmul)}; the seed's is \"highest\", TF32 off): compare float32 timings across them with "
            "care."]
