"""The method interface: what the trainer, the evaluation and the reports need from a method.

A method is registered with `@register` (see `methods/__init__.py`) and provides:

* `from_config(config, env, model_config)`: build it for an environment;
* `init(key, example) -> params` and `loss(params, batch, key) -> (loss, metrics)`: what the one
  trainer (`icrl_jax/pipeline/train.py`) optimises;
* `training_data(dataset, config, env) -> TrainData`: the view of a stored dataset it trains on
  (step windows of learning histories, trajectory windows, or a loader over a pixel store);
* `policies(params, env, config) -> {name: ParamSource}`: how the trained model acts, run by the
  one rollout driver (`data/history_generation.py`) on JAX envs and through the bridge on host envs;
* hooks: `prepare_config` (fields filled before the config is locked), `signature` (what a
  checkpoint must agree on), `eval_params` (per-evaluation parameters),
  `label` (its row name in reports), `trainable` (frozen parameters), `any_action_count`
  (whether it acts on action sets of any size), `write_analysis` (extra evaluation outputs such
  as attention maps).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

from icrl_jax.data.train_data import TrainData
from icrl_jax.models.features import feature_label, feature_signature
from icrl_jax.models.transformer import Transformer


class Method(abc.ABC):
    """Base class of every method (see the module docstring)."""

    name: ClassVar[str] = ""
    #: Shown in reports; defaults to `name`.
    display_name: ClassVar[str] = ""
    #: True when the trained model acts on action sets of any size (Headless-AD); otherwise an
    #: evaluation env with more actions than the training env is "not applicable".
    any_action_count: ClassVar[bool] = False

    @classmethod
    @abc.abstractmethod
    def from_config(cls, config, env, model_config) -> "Method":
        """The method for `env`, its model configured by `model_config`."""

    @classmethod
    def prepare_config(cls, config) -> None:
        """Fill, in place and before the config is finalised, fields that depend on more than
        the config file (e.g. a pretrained checkpoint's architecture). Default: nothing."""
        del config

    @classmethod
    def signature(cls, config, env) -> dict[str, Any]:
        """What a checkpoint must agree on to be restored into this run's model (parameter shapes
        are compared by the checkpointer itself)."""
        backbone = Transformer.changed_settings(config.model)
        return dict(method=cls.name, env=config.env.name,
                    num_actions=None if cls.any_action_count else env.num_actions,
                    num_observations=env.num_observations,
                    **{f"model.{k}": v for k, v in backbone.items()},
                    **feature_signature(config.model))

    @classmethod
    def label(cls, config) -> str:
        """The row name in reports: `report.label`, else `variant_name(config)`."""
        return config.report.label or cls.variant_name(config)

    @classmethod
    def variant_name(cls, config) -> str:
        """The method's name with its configured variant marked (default: the name and the
        model features it uses, e.g. "AD + n-gram")."""
        return (cls.display_name or cls.name) + feature_label(config.model)

    #: `trainable(params) -> pytree of bool`: which parameters the optimiser updates (None: all).
    trainable: ClassVar[Any] = None

    def eval_params(self, params, key, env) -> Any:
        """Parameters of one evaluation run (default: the trained ones)."""
        del key, env
        return params

    @abc.abstractmethod
    def training_data(self, dataset, config, env) -> TrainData:
        """The view of `dataset` (a `History` or a pixel store) that `loss` trains on."""

    @abc.abstractmethod
    def policies(self, params, env, config) -> dict[str, Any]:
        """{name: `ParamSource`}: the trained model's policies to evaluate."""

    def write_analysis(self, params, final_states: dict[str, Any], config, env) -> dict[str, Any]:
        """Extra evaluation outputs from the final policy states of `policies`' rollouts
        (default: none). Returns entries for eval.json."""
        del params, final_states, config, env
        return {}
