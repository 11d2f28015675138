"""The gate: a config checked once, with its environment built once and its network checked
once, handed on as one `Bundle`.

    bundle = gate(cfg)                      # or gate({"env": "CartPole-v1", ...}), gate(cfg, network=module)
    Learner(bundle), make_train(bundle), make_policy(bundle, state)   # nothing is checked or built again

`Learner(cfg)`, `make_train(cfg)` and `make_policy(cfg, state)` pass a config through the gate
themselves; the experiment side (plans, run folders, evaluation, replay) passes each config
through it exactly once and hands the bundle down. A bundle is made only here (and, for
another run of the same program, by `Bundle.for_config`): there is no "already checked" flag.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from purejaxppo.agent import Agent, make_agent
from purejaxppo.config import ACTION_KIND_FIELDS, STATIC_FIELDS, PPOConfig, check_config, check_fields
from purejaxppo.envs import Env, check_env_config, make_env
from purejaxppo.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Bundle:
    """A checked config with its environment and its agent (the network, checked)."""

    config: PPOConfig
    env: Env
    agent: Agent

    def for_config(self, cfg: PPOConfig) -> Bundle:
        """This bundle for `cfg`, another config of the same program: every static field equal
        but max_epochs (what a sweep's run set scans), so the environment and the network are
        the same ones. `cfg`'s fields must have been checked (`check_fields`)."""
        differ = [f for f in STATIC_FIELDS if f != "max_epochs" and getattr(cfg, f) != getattr(self.config, f)]
        if differ:
            raise ConfigError(differ[0], getattr(cfg, differ[0]), f"differs from the bundle's "
                              f"({getattr(self.config, differ[0])!r}): another environment or network needs "
                              f"a bundle of its own (gate)")
        return dataclasses.replace(self, config=cfg)


def gate(config: PPOConfig | Mapping[str, Any], *, env: Env | None = None, network=None,
         where: str = "config", update_epochs: bool = True) -> Bundle:
    """Check `config` (a `PPOConfig`, or a mapping of values: YAML contents, overrides) as
    `make_config` checks it, build its environment (`env`: the one already built for its env
    and env_params) and its agent (`network`: a flax.linen module in place of the config's;
    its output shapes checked by jax.eval_shape, nothing compiles) -> the Bundle.
    `update_epochs=False` leaves out "update_epochs <= max_epochs" (a learner run with HParams
    reads update_epochs from them: `Learner.run` checks it there). Raises ConfigError."""
    if isinstance(config, Bundle):
        raise ConfigError(where, "Bundle", "is checked already: hand it on as it is")
    cfg = (check_config(config, env=False, update_epochs=update_epochs) if isinstance(config, PPOConfig)
           else check_fields(config, where=where))
    env = make_env(cfg) if env is None else env
    check_env_config(cfg, ACTION_KIND_FIELDS, env)
    return Bundle(cfg, env, make_agent(cfg, env, network))


def bundle_of(cfg: PPOConfig | Bundle, *, env: Env | None = None, network=None, update_epochs: bool = True
              ) -> Bundle:
    """What `Learner`, `make_train` and `make_policy` take: a Bundle, as it is, or a PPOConfig,
    through the gate (`env`, `network`: see `gate`; a Bundle has its own)."""
    if isinstance(cfg, Bundle):
        if network is not None or env is not None:
            raise TypeError("a Bundle has its network and environment: pass network= and env= to gate() instead")
        return cfg
    if not isinstance(cfg, PPOConfig):
        raise ConfigError("config", type(cfg).__name__, "must be a PPOConfig (build one with make_config) or a "
                          "Bundle (gate)")
    return gate(cfg, env=env, network=network, update_epochs=update_epochs)
