"""What a user brings is honoured exactly or refused in one line: optional members survive
every adapter and wrapper; installed names cannot take a built-in's place; whatever a
factory does, and any object that breaks the protocol, is one ConfigError before training."""

import importlib.metadata

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
import user_envs
from purejaxppo import envs
from purejaxppo.envs import ActionSpace, AutoReset, EpisodeStats, GymnaxEnv
from purejaxppo.envs.base import OF_STATE, OPTIONAL, RESET_STRATEGY
from purejaxppo.errors import ConfigError

TINY = dict(num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2, total_timesteps=4 * 16 * 3)


def refusal(values: dict) -> str:
    """make_config's one-line refusal of `values` (with TINY)."""
    with pytest.raises(ConfigError) as caught:
        ppo.make_config(dict(TINY, **values))
    assert "\n" not in str(caught.value), str(caught.value)
    return str(caught.value)


# --------------------------------------------------------------------------------------
# Optional members survive every adapter and wrapper
# --------------------------------------------------------------------------------------
# A value of each optional member unlike its default; those of the state depend on it (the
# gymnax state's `time`: 0 after reset), so a wrapper that passes its own state shows.
SAMPLES = {"reset_strategy": "per_rollout",
           "action_mask": lambda state: jnp.arange(2) == state.time % 2}
# adapter or wrapper -> (what it wraps, without optional members: a gymnax CartPole, raw or adapted; the wrapping)
WRAPPINGS = {
    "GymnaxEnv": (lambda: gymnax.make("CartPole-v1")[0], lambda inner: GymnaxEnv("mine", environment=inner)),
    "EpisodeStats": (lambda: GymnaxEnv("CartPole-v1"), EpisodeStats),
    "AutoReset": (lambda: GymnaxEnv("CartPole-v1"), AutoReset),
    "AutoReset(EpisodeStats)": (lambda: GymnaxEnv("CartPole-v1"), lambda inner: AutoReset(EpisodeStats(inner))),
}


def given(env, member):
    """What `env` gives as `member`: the protocol's default where it gives none."""
    return getattr(env, member, RESET_STRATEGY if member == "reset_strategy" else None)


@pytest.mark.parametrize("wrapping", WRAPPINGS)
@pytest.mark.parametrize("member", OPTIONAL)
def test_every_adapter_and_wrapper_gives_each_optional_member_exactly_where_what_it_wraps_does(member, wrapping):
    make_inner, wrap = WRAPPINGS[wrapping]
    assert given(wrap(make_inner()), member) == given(make_inner(), member)  # not given: not made up
    inner = make_inner()
    setattr(inner, member, SAMPLES[member])
    outer = wrap(inner)
    if member in OF_STATE:
        _, state = outer.reset(jax.random.PRNGKey(0))
        np.testing.assert_array_equal(given(outer, member)(state), [True, False])
        _, state, *_ = outer.step(jax.random.PRNGKey(1), state, 0)
        np.testing.assert_array_equal(given(outer, member)(state), [False, True])  # of the state it is given
    else:
        assert given(outer, member) == SAMPLES[member]


class StateOnlyMask(user_envs.GymnaxCorridor):
    def action_mask(self, state):  # without params: also accepted
        return self.corridor.action_mask(state)


@pytest.mark.parametrize("environment", [user_envs.GymnaxCorridor(), StateOnlyMask()], ids=["state, params", "state"])
def test_a_gymnax_environments_mask_is_the_adapters_as_a_gymnax_user_writes_it(registry, environment):
    registry.register("gymnax-corridor", lambda: environment)
    env = ppo.make_env(ppo.make_config(dict(TINY, env="gymnax-corridor")))
    assert env.has_action_mask
    _, state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(1), 64))
    mask = np.asarray(jax.vmap(env.action_mask)(state))
    np.testing.assert_array_equal(mask, jax.vmap(environment.corridor.action_mask)(state.env_state))
    assert not np.all(mask[:, 0]) and not np.any(mask[:, 2])  # LEFT at the first cell, LEAP anywhere
    assert ppo.Learner(ppo.make_config(dict(TINY, env="gymnax-corridor"))).agent.masked


def test_a_gymnax_action_space_of_another_kind_is_refused(registry):
    class Dicts(user_envs.GymnaxCorridor):
        def action_space(self, params):
            return gymnax.environments.spaces.Dict({"move": gymnax.environments.spaces.Discrete(3)})

    registry.register("dicts", Dicts)
    assert "its action space is a gymnax Dict: only Discrete and Box" in refusal(dict(env="dicts"))


# --------------------------------------------------------------------------------------
# Installed names cannot take a built-in's place
# --------------------------------------------------------------------------------------
def installed(tmp_path, monkeypatch, points: dict[str, str], package: str = "their-envs"):
    """`package` installed, alone, with these entry points of group purejaxppo.envs
    (name -> module:factory): importlib.metadata.entry_points gives exactly them."""
    info = tmp_path / f"{package}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[purejaxppo.envs]\n" + "".join(f"{n} = {v}\n" for n, v in points.items()))
    dist = importlib.metadata.PathDistribution(info)
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [ep for ep in dist.entry_points if ep.group == group])


@pytest.mark.parametrize("name, clash", [
    ("CartPole-v1", "clashes with the built-in gymnax environment"),
    ("brax/mine", "clashes with the built-in family brax/"),
    ("gymnax/CartPole-v1", "clashes with the built-in family gymnax/"),
])
def test_an_entry_point_named_as_a_built_in_is_refused_never_used(tmp_path, monkeypatch, name, clash):
    installed(tmp_path, monkeypatch, {name: "user_envs:corridor", "their-corridor": "user_envs:corridor"})
    line = refusal(dict(env=name))
    assert line.startswith(f"env={name!r}: the entry point {name} = user_envs:corridor") and clash in line, line
    assert "package their-envs" in line, line
    assert name not in envs.registered() and "their-corridor" in envs.registered()  # the others still offered
    assert ppo.make_env(ppo.make_config(dict(TINY, env="their-corridor"))).obs_shape == (6,)
    with pytest.raises(ConfigError, match=clash):  # the same rule as register's
        envs.register(name, user_envs.corridor)


@pytest.mark.parametrize("value, needle", [
    ("user_envs:failing", "the entry point their-grid = user_envs:failing (group purejaxppo.envs) of package "
                          "their-envs: its factory(**env_params) failed: RuntimeError: the map file is missing"),
    ("no_such_module:make", "the entry point their-grid = no_such_module:make (group purejaxppo.envs) of package "
                            "their-envs cannot be loaded: ModuleNotFoundError"),
])
def test_an_entry_point_that_fails_names_its_package(tmp_path, monkeypatch, value, needle):
    installed(tmp_path, monkeypatch, {"their-grid": value})
    line = refusal(dict(env="their-grid"))
    assert line.startswith("env='their-grid': ") and needle in line, line


# --------------------------------------------------------------------------------------
# Whatever a factory does is one line
# --------------------------------------------------------------------------------------
FACTORIES = {"env": dict(env="user_envs:failing"), "network": dict(network="user_networks:failing")}


@pytest.mark.parametrize("how, error", [("raise", "RuntimeError: the map file is missing"), ("exit", "SystemExit: 3")])
@pytest.mark.parametrize("kind", FACTORIES)
def test_a_factory_that_raises_anything_or_exits_is_one_line_naming_it(kind, how, error):
    params = {"env_params": {"how": how}} if kind == "env" else {"network_kwargs": {"how": how}}
    line = refusal(dict(FACTORIES[kind], **params))
    assert line.startswith(f"{kind}='user_") and f"failed: {error}" in line and "second line" not in line, line


@pytest.mark.parametrize("kind", FACTORIES)
def test_a_stop_in_a_factory_still_stops(kind):
    params = {"env_params": {"how": "stop"}} if kind == "env" else {"network_kwargs": {"how": "stop"}}
    with pytest.raises(KeyboardInterrupt):
        ppo.make_config(dict(TINY, **FACTORIES[kind], **params))


def test_a_network_of_integer_outputs_is_refused():
    line = refusal(dict(network="user_networks:IntegerLogits"))
    assert "must return floating actor_out and value; its actor_out is int32[batch, 2]" in line, line


def box(**values):
    return ActionSpace("continuous", **{"shape": (2,), "low": -np.ones(2), "high": np.ones(2), **values})


class ShapeLater(user_envs.Corridor):
    @property
    def obs_shape(self):
        raise ValueError("no shape yet")

    @obs_shape.setter
    def obs_shape(self, value):
        pass


BROKEN = [  # (what the factory returns, in the line)
    (lambda: user_envs.corridor_with(action_space=ActionSpace("box", num_actions=3)),
     "action_space.kind must be discrete or continuous, not 'box'"),
    (lambda: user_envs.corridor_with(action_space=ActionSpace("discrete", num_actions=0)),
     "needs num_actions, an int of at least 1; it has 0"),
    (lambda: user_envs.corridor_with(action_space=ActionSpace("discrete", num_actions=True)), "it has True"),
    (lambda: user_envs.corridor_with(action_space=box(shape=())), "needs shape, a non-empty tuple"),
    (lambda: user_envs.corridor_with(action_space=box(shape=(2, 0))), "it has (2, 0)"),
    (lambda: user_envs.corridor_with(action_space=box(low=np.array([0.0, 2.0]))),
     "action_space.low must not exceed action_space.high; at index [1] low is 2 and high 1"),
    (lambda: user_envs.corridor_with(action_space=box(high=np.array([1.0, np.nan]))), "action_space.high holds NaN"),
    (lambda: user_envs.corridor_with(action_space=box(low=None)), "action_space.low must be numbers"),
    (lambda: user_envs.corridor_with(action_space=box(low=np.ones(3))), "of the action's shape [2]"),
    (lambda: user_envs.corridor_with(action_space=box(low=np.inf, high=np.inf)), "must be below +inf"),
    (lambda: user_envs.corridor_with(action_mask=lambda state: jnp.zeros(3, bool)),
     "action_mask(state) allows no action in the state reset(PRNGKey(0)) gives"),
    (lambda: user_envs.corridor_with(action_mask=lambda state: jnp.ones(4, bool)),
     "action_mask(state) must be bool[3]; it is bool[4]"),
    (lambda: user_envs.corridor_with(action_mask=[True, True, False]), "action_mask must be a function"),
    (lambda: user_envs.corridor_with(reset_strategy="sometimes"), "reset_strategy must be per_step or per_rollout"),
    (ShapeLater, "failed as its members were read: ValueError: no shape yet"),
]


@pytest.mark.parametrize("factory, needle", BROKEN, ids=[needle[:40] for _, needle in BROKEN])
def test_an_object_that_breaks_the_protocol_is_refused_naming_the_environment(registry, factory, needle):
    registry.register("mine", factory)
    line = refusal(dict(env="mine"))
    assert line.startswith("env='mine': ") and needle in line, line


def open_pendulum():
    """Pendulum whose torque is bounded below only."""
    env = GymnaxEnv("Pendulum-v1")
    env.action_space = ActionSpace("continuous", shape=(1,), low=np.array([-2.0]), high=np.array([np.inf]))
    return env


def test_an_open_side_of_the_box_is_clipped_but_cannot_be_squashed(registry):
    registry.register("open-pendulum", open_pendulum)
    assert ppo.make_env(ppo.make_config(dict(TINY, env="open-pendulum"))).action_space.high[0] == np.inf
    line = refusal(dict(env="open-pendulum", action_squash="tanh"))
    assert line.startswith("action_squash='tanh': ") and "must be finite with low < high" in line, line


# --------------------------------------------------------------------------------------
# A misspelt name suggests the user's own names too
# --------------------------------------------------------------------------------------
def test_a_misspelt_name_suggests_registered_and_installed_names(registry, tmp_path, monkeypatch):
    installed(tmp_path, monkeypatch, {"their-grid-v2": "user_envs:corridor"})
    registry.register("MyGrid-v0", user_envs.corridor)
    registry.register("mine/grid-v0", user_envs.corridor)
    assert "did you mean MyGrid-v0," in refusal(dict(env="MyGrid-v1"))
    assert "did you mean their-grid-v2" in refusal(dict(env="their-grid-v1"))
    assert "did you mean mine/grid-v0?" in refusal(dict(env="mine/grid-v1"))
    assert "did you mean CartPole-v1" in refusal(dict(env="CartPole-v2"))  # gymnax's still
