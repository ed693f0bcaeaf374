"""capgeo's decoder-only transformer family and the LightningModule that trains it."""

from models.lightning_module import CapabilityModule
from models.sizes import SIZES, build_model, size_config
from models.transformer import ModelConfig, Transformer, math_attention

__all__ = ["SIZES", "CapabilityModule", "ModelConfig", "Transformer", "build_model", "math_attention", "size_config"]
