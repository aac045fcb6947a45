"""DPT's config fields (pure ml_collections: experiment files import this)."""

from __future__ import annotations

import ml_collections

from icrl_jax.core import validation
from icrl_jax.core.config import base_config


def dpt_config() -> ml_collections.ConfigDict:
    """`base_config()` for DPT: `config.method = "dpt"`, labelled histories
    (`data.builder="dpt_histories"`), the model's field and the `dpt` section."""
    config = base_config()
    config.method = "dpt"
    config.data.builder = "dpt_histories"
    # The authors' `--shuffle`: each training context's transitions in a random order.
    config.model.shuffle_context = True
    config.dpt = ml_collections.ConfigDict(dict(
        # Also evaluate offline: each evaluation task gets a fixed dataset of `offline_steps`
        # transitions (0 = train.seq_len) of `offline_source` ("" = data.source, with
        # data.source_kwargs), made from the rollout's own key, so every offline policy reads
        # the same one; the model then acts greedily on it without ever adding to it.
        offline=False,
        offline_steps=0,
        offline_source="",
        # Registered sources evaluated beside the model on the same tasks and keys: name ->
        # kwargs, online (they learn from their own interactions) and offline (they read the
        # offline dataset first, then never update; listed as "<name>_offline").
        comparisons=ml_collections.ConfigDict(),
        offline_comparisons=ml_collections.ConfigDict(),
        # `report.kind="dpt_claims"` also trains AD on the same histories and evaluates it on
        # the same tasks (its own work directory, `<workdir>/ad`), its model fields as DPT's
        # but for `ad_model`'s (e.g. an observation encoder; `model.position` is "learned"
        # unless it says otherwise).
        compare_ad=False,
        ad_model=ml_collections.ConfigDict(),
    ))
    return config


def _named_kwargs(value) -> bool:
    """A mapping of source names to mappings of their keyword arguments."""
    return hasattr(value, "items") and all(isinstance(k, str) and hasattr(v, "keys")
                                           for k, v in value.items())


def _comparison_violation(config, comparisons, label: str) -> str | None:
    """The first comparison source (name -> kwargs) that is not registered or whose kwargs
    break its declared rules, as a message naming `label`."""
    for name, kwargs in comparisons.items():
        message = validation.kwargs_violation(config, "source", name, kwargs, label)
        if message is not None:
            return message
    return None


def _comparisons_constraint(key: str) -> validation.Constraint:
    """The sources of `key` (a `_named_kwargs` mapping) are registered and take their kwargs,
    checked before anything runs (they are built only at evaluation)."""
    def violation(config, comparisons):
        return _comparison_violation(config, comparisons, key) if _named_kwargs(comparisons) \
            else None
    return validation.Constraint((key,), "", lambda config, value: violation(config, value) is None,
                                 "", needs="config", message=violation)


#: What the DPT fields take (core/validation.py).
DPT_CONSTRAINTS = validation.declare("dpt", (
    validation.boolean("model.shuffle_context"), validation.boolean("dpt.offline"),
    validation.non_negative_int("dpt.offline_steps", 0), validation.string("dpt.offline_source", "dirichlet_mixture"),
    validation.Constraint(("dpt.comparisons",), "must map source names to their kwargs",
                 _named_kwargs, "\"{'ucb': {}}\""),
    validation.Constraint(("dpt.offline_comparisons",), "must map source names to their kwargs",
                 _named_kwargs, "\"{'lcb': {}}\""),
    _comparisons_constraint("dpt.comparisons"), _comparisons_constraint("dpt.offline_comparisons"),
    validation.boolean("dpt.compare_ad"),
    validation.Constraint(("dpt.ad_model",), "must be a mapping of AD's model fields",
                          lambda value: hasattr(value, "keys"), "\"{'position': 'rotary'}\""),
))
