"""The aesthetic head: a score from a clip's CLIP image embedding, read from a file the user gives.

The field's standard heads are LAION's, which all take the unit-length CLIP ViT-L/14 image
embedding (768 values) and return a score on the 1-10 scale of the ratings they were fit to:
- the linear heads of LAION-AI/aesthetic-predictor (`sa_0_4_vit_l_14_linear.pth`): one
  `torch.nn.Linear(768, 1)` saved as its state_dict, keys `weight` (1 x 768) and `bias` (1);
- the MLP heads of christophschuhmann/improved-aesthetic-predictor
  (`sac+logos+ava1-l14-linearMSE.pth`, the one most pipelines use): an `nn.Sequential` named
  `layers` of Linear 768->1024, Dropout, Linear 1024->128, Dropout, Linear 128->64, Dropout,
  Linear 64->16, Linear 16->1, saved as its state_dict: keys `layers.{0,2,4,6,7}.weight` and
  `.bias`. Its ReLUs are commented out in the source, so at inference it is five affine maps in
  a row; the `reluMSE` variants put a ReLU after each but the last (`activation='relu'`).
Dropout has no weights and does nothing at inference, so a head is its Linear layers in key
order. Both `.pth` (torch.save of a state_dict, read with weights_only) and `.safetensors` are read.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

ACTIVATIONS = ("none", "relu")
_LAYER_KEY = re.compile(r"^(?:layers\.)?(?:(\d+)\.)?(weight|bias)$")


class AestheticHeadError(ValueError):
    """A head file that is missing or not in a format this module reads (names the setting)."""


class AestheticHead:
    """Linear layers applied in order to unit CLIP embeddings (float32 numpy, N x dim)."""

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray]], activation: str = "none"):
        self.layers = layers
        self.activation = activation

    @property
    def input_size(self) -> int:
        return int(self.layers[0][0].shape[1])

    def __call__(self, embeddings: np.ndarray) -> np.ndarray:
        x = np.asarray(embeddings, np.float32)
        for number, (weight, bias) in enumerate(self.layers):
            x = x @ weight.T + bias
            if self.activation == "relu" and number < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        return x[:, 0]


def load_head(setting: str, location: str | Path, activation: str = "none") -> AestheticHead:
    """The head saved at `location`; an error naming `setting` when it cannot be one."""
    path = Path(location).expanduser()
    if not path.is_file():
        raise AestheticHeadError(f"{setting}={location}: no such aesthetic head file")
    try:
        state = _read_state(path)
    except Exception as exc:  # torch and safetensors raise many kinds on a foreign file
        raise AestheticHeadError(
            f"{setting}={location}: not a saved state_dict ({type(exc).__name__}: {exc})"
        ) from None
    layers = _linear_layers(state)
    if isinstance(layers, str):
        raise AestheticHeadError(f"{setting}={location}: {layers}")
    return AestheticHead(layers, activation)


def _read_state(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".safetensors":
        from safetensors.numpy import load_file

        return {k: v.astype(np.float32) for k, v in load_file(str(path)).items()}
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise TypeError(f"holds a {type(state).__name__}, not a dict of tensors")
    return {k: v.float().numpy() for k, v in state.items() if isinstance(v, torch.Tensor)}


def _linear_layers(state: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]] | str:
    """The (weight, bias) pairs in layer order, checked to chain into one score; or what is
    wrong with them."""
    found: dict[int, dict[str, np.ndarray]] = {}
    for key, value in state.items():
        match = _LAYER_KEY.match(key)
        if match is None:
            return f"unexpected key {key!r} (expected weight/bias or layers.N.weight/bias)"
        found.setdefault(int(match.group(1) or 0), {})[match.group(2)] = value
    if not found:
        return "holds no weights"
    layers = []
    for index in sorted(found):
        part = found[index]
        if set(part) != {"weight", "bias"} or part["weight"].ndim != 2:
            return f"layer {index} is not a Linear layer (a 2-D weight and a bias)"
        layers.append((part["weight"], part["bias"].reshape(-1)))
    for (weight, _), (following, _) in zip(layers, layers[1:]):
        if weight.shape[0] != following.shape[1]:
            return f"layers do not chain ({weight.shape[0]} outputs into {following.shape[1]})"
    if layers[-1][0].shape[0] != 1:
        return f"the last layer gives {layers[-1][0].shape[0]} values, not one score"
    return layers
