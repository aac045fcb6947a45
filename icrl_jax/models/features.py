"""Model features beside the backbone's blocks (the n-gram layers, `models/ngram.py`): what each
adds to a run's label in reports and to a checkpoint's signature.

A feature registers itself where it is defined (`FEATURES.register(name, feature)`), an object
with `label(model_config) -> str` (a suffix such as " + n-gram", "" when the config does not use
it) and `signature(model_config) -> dict` (what a checkpoint trained with it must agree on). A
method asks for all of them (`feature_label`, `feature_signature`) and never names one. A model
config without a feature's fields (another method's) gets nothing from it.
"""

from __future__ import annotations

from typing import Any

from icrl_jax.core.registry import Registry

#: name -> feature (`label`, `signature`); the shared model features register here.
FEATURES = Registry("model feature", modules=("icrl_jax.models.ngram",))


def feature_label(model_config) -> str:
    """The label suffixes of the features `model_config` uses, in the features' name order."""
    return "".join(feature.label(model_config) for _, feature in FEATURES.items())


def feature_signature(model_config) -> dict[str, Any]:
    """The signature fields of the features `model_config` uses."""
    out: dict[str, Any] = {}
    for _, feature in FEATURES.items():
        out.update(feature.signature(model_config))
    return out
