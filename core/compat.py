"""Make `import torchvision` work beside the CPU torch this project pins.

The only torchvision wheel built for torch 2.13.0 is a CUDA build; on a CPU-only torch its C++
extension does not load, so the operator schemas `torchvision::nms` and `torchvision::qnms` are
never defined and torchvision's own fake-kernel registration fails at import (and with it ptlflow,
timm and transformers' image processors). Defining the two schemas first lets the import finish;
the ops themselves stay unavailable, which nothing in this project calls.
On a machine where the extension does load, the schemas already exist and nothing is done.
"""

from __future__ import annotations

_MISSING_OPS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_library = None  # kept alive: dropping a torch.library.Library object removes its definitions


def ensure_torchvision_importable() -> None:
    global _library
    import torch

    missing = [name for name in _MISSING_OPS if not _schema_exists(torch, name)]
    if not missing or _library is not None:
        return
    _library = torch.library.Library("torchvision", "FRAGMENT")
    for name in missing:
        _library.define(_MISSING_OPS[name])


def _schema_exists(torch, name: str) -> bool:
    try:
        getattr(torch.ops.torchvision, name)
        return True
    except (AttributeError, RuntimeError):
        return False
