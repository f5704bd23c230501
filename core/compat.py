"""Make `import torchvision` work beside the CPU torch this project pins, and `import ptlflow`
beside faiss-cpu (where an environment has it).

The only torchvision wheel built for torch 2.13.0 is a CUDA build; on a CPU-only torch its C++
extension does not load, so the operator schemas `torchvision::nms` and `torchvision::qnms` are
never defined and torchvision's own fake-kernel registration fails at import (and with it ptlflow,
timm and transformers' image processors). Defining the two schemas first lets the import finish;
the ops themselves stay unavailable, which nothing in this project calls.
On a machine where the extension loads (GPU machines), it is loaded first and nothing is defined:
defining the schemas before it would abort the process at its load.
`prepare_torchvision_import` arranges the same just before torchvision is first looked up, so that
a package can promise an importable torchvision without importing torch itself (2 s) at import.
"""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder
from pathlib import Path
from types import ModuleType

_MISSING_OPS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_library = None  # kept alive: dropping a torch.library.Library object removes its definitions


def ensure_torchvision_importable() -> None:
    global _library
    import torch

    if _library is not None or _extension_loads(torch):
        return
    missing = [name for name in _MISSING_OPS if not _schema_exists(torch, name)]
    if not missing:
        return
    _library = torch.library.Library("torchvision", "FRAGMENT")
    for name in missing:
        _library.define(_MISSING_OPS[name])


class _BeforeTorchvision(MetaPathFinder):
    """Asked first where any module is (`import torchvision`, or find_spec as transformers probes
    it): at the first question about torchvision it steps aside and makes torchvision importable,
    then lets the ordinary finders answer."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            if self in sys.meta_path:
                sys.meta_path.remove(self)  # before: ensure_torchvision_importable looks it up too
            ensure_torchvision_importable()
        return None


def prepare_torchvision_import() -> None:
    """`ensure_torchvision_importable()`, deferred to the first lookup of torchvision: nothing
    (torch included) is imported now. The trainer's command modules import this way, so that a
    command checks its arguments and inputs before torch is ever imported."""
    if "torchvision" in sys.modules:
        return  # imported already: it was importable
    if not any(isinstance(finder, _BeforeTorchvision) for finder in sys.meta_path):
        sys.meta_path.insert(0, _BeforeTorchvision())


def _schema_exists(torch, name: str) -> bool:
    try:
        getattr(torch.ops.torchvision, name)
        return True
    except (AttributeError, RuntimeError):
        return False


def _extension_loads(torch) -> bool:
    """Load torchvision's C++ extension as torchvision itself will; False when it cannot load.

    Where it loads (a torchvision built for this torch, as on GPU machines), it defines the real
    schemas, and defining ours first would make that load abort the process.
    """
    from importlib.util import find_spec

    spec = find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return True  # no torchvision: nothing to make importable
    folder = Path(next(iter(spec.submodule_search_locations)))
    libraries = sorted(folder.glob("_C.*so")) + sorted(folder.glob("_C.so"))
    if not libraries:
        return False
    try:
        torch.ops.load_library(str(libraries[0]))
    except (OSError, RuntimeError):
        return False
    return True


def import_ptlflow() -> ModuleType:
    """ptlflow, imported so that faiss-cpu beside it does not break the import.

    ptlflow imports every model it ships when it is imported. Its SCV model probes faiss at that
    moment (`faiss.StandardGpuResources()`) and catches only ImportError, but faiss-cpu (which the
    duplicate search used before pipeline/passes/bitscan.py; an environment may still have it) has no GPU
    resources: the probe raises AttributeError and takes the whole package down, MemFlow with
    it. So while ptlflow imports, faiss reads as absent (a None entry in sys.modules makes `import
    faiss` raise ImportError) and SCV, a model this project does not use, takes its no-faiss path;
    faiss is then put back as it was.
    """
    ensure_torchvision_importable()  # ptlflow imports torchvision
    if "ptlflow" in sys.modules:
        return sys.modules["ptlflow"]
    absent = object()
    faiss = sys.modules.get("faiss", absent)
    sys.modules["faiss"] = None  # type: ignore[assignment]
    try:
        import ptlflow
    finally:
        if faiss is absent:
            del sys.modules["faiss"]
        else:
            sys.modules["faiss"] = faiss  # type: ignore[assignment]
    return ptlflow
