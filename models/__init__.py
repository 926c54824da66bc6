"""PyTorch networks: AttConv, ABCNN and ACT (plus a Transformer baseline). No I/O here."""

from models.base import PAD_ID, TASKS, IdsOnly, NetworkConfig, TextClassifier
from models.registry import architectures, build_network, config_to_dict, make_config, network_from_dict, serve_as

__all__ = [
    "PAD_ID",
    "TASKS",
    "IdsOnly",
    "NetworkConfig",
    "TextClassifier",
    "architectures",
    "build_network",
    "config_to_dict",
    "make_config",
    "network_from_dict",
    "serve_as",
]
