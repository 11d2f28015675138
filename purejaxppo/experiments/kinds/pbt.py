"""Population-based training as a kind (`sweep: pbt:`): its section, its members (the points),
its schedule (chunks of its interval, the exploit/explore step between them: `pbt.Population`),
and its report (`pbt_report`). Its door from Python is `pbt_api.pbt` (`ppo.pbt`)."""

from __future__ import annotations

from typing import Any, Mapping

from purejaxppo.config import ConfigError
from purejaxppo.errors import NO_VALUE
from purejaxppo.experiments import pbt as method
from purejaxppo.experiments.kinds.base import Kind, Schedule, speed_line


class Pbt(Kind):
    """Population-based training: members exploit and explore between chunks of the interval."""

    key = "pbt"

    def parse(self, section: Any, grid: Mapping, random: Mapping) -> dict:
        checked = method.make_pbt(section)
        if grid or random:
            raise ConfigError("sweep.pbt", NO_VALUE, f"is given with {'grid:' if grid else 'random:'}; PBT draws "
                              "its own population (pbt: hyperparameters:): give one of them")
        return checked

    def points(self, spec) -> list[dict]:
        """The members' initial hyperparameters (a random search's points)."""
        return method.initial_points(spec.section, spec.random_seed)

    def swept(self, spec) -> list[str]:
        return list(spec.section["hyperparameters"])

    def factors(self, spec) -> dict[str, tuple[int, str]]:
        return {"pbt.population": (spec.section["population"], "sweep.pbt.population"),
                "seeds": (spec.seeds, "--seeds, sweep.seeds")}

    def check_plan(self, spec, configs: list) -> None:
        """Every member explores traced keys only (one group, one run set): its interval within the run."""
        method.check_interval(spec.section, configs[0].num_updates)

    def schedule(self, spec, first_seed: int, checkpoint_every: int | None) -> Schedule:
        """Chunks of the interval, a checkpoint after every `checkpoint_every` of them (default: each)."""
        population = method.Population(spec.section, spec.seeds, first_seed, spec.random_seed)
        return Schedule(spec.section["interval"], checkpoint_every or 1, population)

    def describe(self, planned) -> str:
        return (f"PBT, {len(planned.points)} members x {planned.spec.seeds} seed(s), exploit/explore every "
                f"{planned.spec.section['interval']} updates")

    def write_results(self, folder, result, reference: str | None = None) -> tuple[bool, list]:
        from purejaxppo.experiments.kinds import pbt_report  # when results are written: a spec is checked without it

        summary = pbt_report.pbt_summary(result)
        finished = folder.write_results(pbt_report.pbt_artefacts(result, summary))
        return finished, [pbt_report.pbt_markdown(summary), speed_line(result)]


KIND = Pbt()
