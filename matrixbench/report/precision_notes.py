"""The report's one line on TF32: the runner keeps the seed's precision flags (runner.precision:
float32 matmuls at "highest", no TF32; cuDNN convolutions allowed TF32) in every cell, for
comparability; on a GPU that has TF32 (compute capability 8.0+), the reader is told it was off."""
MATMUL = "precision.float32_matmul_precision"
AVAILABLE = "precision.tf32_available"
CUDNN = "precision.cudnn_allow_tf32"
TF32_CELL = "cell.tf32"           # the tf32 axis (runner.axes): a cell that asked for TF32 matmuls


# What TF32 off for matmuls means for the timings, by cuDNN's TF32 flag in the records (convolutions are most of a
# CNN's time: ResNet, DETR's backbone)
_OFF_MEANS = {
    (False,): "float32 timings here are full-precision ones, slower than with TF32 on.",
    (True,): "float32 matmuls ran at full precision, slower than with TF32 on, while convolutions could run in TF32: "
             "a convolutional model's float32 timings are partly TF32 ones.",
    (): "float32 matmuls ran at full precision, slower than with TF32 on; convolutions could run in TF32 where "
        "cuDNN's flag allowed it.",
}


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
    tf32 = gpu[TF32_CELL].fillna(False).astype(bool) if TF32_CELL in gpu else None
    if tf32 is not None and tf32.any():   # the tf32 axis (runner.axes): its rows say so
        off = sorted(gpu[~tf32][MATMUL].dropna().astype(str).unique())
        on = sorted(gpu[tf32][MATMUL].dropna().astype(str).unique())
        if off in ([], ["highest"]) and on == ["high"]:
            where = "in every record" if not off else "in the rows named tf32 (the tf32 axis), off in the others"
            return [f"TF32 was on for float32 matmuls {where} (float32_matmul_precision \"high\"; the seed's is "
                    f"\"highest\", TF32 off; {convolutions}): a tf32 row's float32 timings are not full-precision "
                    "ones, and only rows without tf32 are compared with the published tables."]
    if matmul == ["highest"]:
        return [f"TF32 was off for float32 matmuls (float32_matmul_precision \"highest\", the seed's flags, in every "
                f"record on a GPU that has TF32; {convolutions}): {_OFF_MEANS.get(tuple(cudnn), _OFF_MEANS[()])}"]
    return [f"TF32 for float32 matmuls differed between records on a GPU that has TF32 (float32_matmul_precision "
            f"{', '.join(matmul)}; the seed's is \"highest\", TF32 off): compare float32 timings across them with "
            "care."]
