"""Configuration: one flat `PPOConfig`, split into static structure and traced `HParams`.

Every field is declared once, in `FIELDS`: its type, whether it is static or traced, its
default, what null means (if allowed), its rules and a line of help. `PPOConfig`,
`HParams`, `HPARAM_FIELDS`, `STATIC_FIELDS`, the type checks, the per-field rule checks,
`purejaxppo train --help-config` and the table of docs/configuration.md are all derived from it.

Static fields decide array shapes and program structure (changing them recompiles).
`HParams` fields are traced values: a sweep stacks them along a run axis and vmaps,
with no recompile. Every check runs here, before anything is compiled, and raises a
`ConfigError` naming the field, the value and the rule.

    fields.py    the declaration (FIELDS) and PPOConfig
    checks.py    make_config, check_config; coercion, rules, suggestions
    hparams.py   HParams and their checks
    files.py     YAML files, load_config, overrides
    help.py      --help-config and the table of docs/configuration.md
"""

from purejaxppo.config.checks import (ALIASES, check_config, check_env_and_network, check_fields, count,
                                      make_config, suggest)
from purejaxppo.config.fields import (ACTION_KIND_FIELDS, ACTIVATIONS, AT_LEAST_1, FIELDS, HPARAM_FIELDS, IN_0_1,
                                      NON_NEGATIVE, POSITIVE, STATIC_FIELDS, TYPES, Field, PPOConfig, Rule, one_of)
from purejaxppo.config.files import config_values, find_config, load_config, parse_override, read_yaml
from purejaxppo.config.help import markdown_table, text_table
from purejaxppo.config.hparams import HParams, check_hparams
from purejaxppo.errors import ConfigError

__all__ = ["ACTION_KIND_FIELDS", "ACTIVATIONS", "ALIASES", "AT_LEAST_1", "ConfigError", "FIELDS", "Field",
           "HPARAM_FIELDS", "HParams", "IN_0_1", "NON_NEGATIVE", "POSITIVE", "PPOConfig", "Rule", "STATIC_FIELDS",
           "TYPES", "check_config", "check_env_and_network", "check_fields", "check_hparams", "config_values", "count", "find_config",
           "load_config", "make_config", "markdown_table", "one_of", "parse_override", "read_yaml",
           "suggest", "text_table"]
