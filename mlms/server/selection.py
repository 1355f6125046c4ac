"""Which agent runs a request: model, framework and version constraint, ``--hw`` (an alias,
or one GPU by index: ``h100:1``), load.

A pure function over a snapshot of the registry, so that it is tested without processes and
the dispatch benchmark measures the decision itself. The framework may carry a constraint:
``torch``, ``torch>=2.4,<3`` (PEP 440) or ``torch^2.4`` / ``torch~2.4`` (semver caret/tilde).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from mlms.catalog.library_models import is_library_name
from mlms.errors import HardwareNotFound, InvalidArgument, Unavailable, UnsupportedFramework
from mlms.manifest import ModelManifest
from mlms.registry.base import AgentRecord

_WANTED = re.compile(r"^\s*([a-z_]+)\s*(.*?)\s*$")


@dataclass(frozen=True)
class FrameworkWanted:
    name: str | None
    versions: SpecifierSet

    def admits(self, name: str, version: str) -> bool:
        if self.name is not None and name != self.name:
            return False
        try:
            return self.versions.contains(Version(version).public, prereleases=True)
        except InvalidVersion:
            return not self.versions


def parse_framework(text: str | None) -> FrameworkWanted:
    """``None``, ``torch``, ``torch>=2.4`` or ``torch^2.4`` -> what an agent must run."""
    if not text:
        return FrameworkWanted(None, SpecifierSet())
    match = _WANTED.match(text)
    if match is None:
        raise InvalidArgument(
            f"bad framework {text!r}: expected a name with an optional version range, "
            "e.g. 'torch', 'torch>=2.4,<3' or 'torch^2.4'"
        )
    name, constraint = match.groups()
    try:
        return FrameworkWanted(name, SpecifierSet(_semver_to_pep440(constraint)))
    except (InvalidSpecifier, InvalidVersion) as exc:
        raise InvalidArgument(
            f"bad version range {constraint!r} in framework {text!r}: expected PEP 440 "
            "('>=2.4,<3') or semver ('^2.4', '~2.4')"
        ) from exc


def _semver_to_pep440(constraint: str) -> str:
    if not constraint or constraint[0] not in "^~":
        return constraint
    base = Version(constraint[1:].strip())
    parts = [*base.release, 0, 0][:3]
    if constraint[0] == "~":  # ~1.2.3: >=1.2.3,<1.3
        upper = f"{parts[0]}.{parts[1] + 1}"
    elif parts[0] > 0:  # ^1.2.3: >=1.2.3,<2
        upper = f"{parts[0] + 1}"
    elif parts[1] > 0:  # ^0.2.3: >=0.2.3,<0.3
        upper = f"0.{parts[1] + 1}"
    else:  # ^0.0.3: >=0.0.3,<0.0.4
        upper = f"0.0.{parts[2] + 1}"
    return f">={base},<{upper}"


def serves_hw(agent: AgentRecord, hw: str, devices: int = 1) -> bool:
    """``--hw h100`` goes to an agent with an H100 among the GPUs it evaluates on (with
    ``devices`` of them for a split model); ``h100:1`` only to the agent of GPU 1
    (``AgentRecord.serves_hw``)."""
    return agent.serves_hw(hw, devices)


def choose(
    agents: Iterable[AgentRecord],
    *,
    manifest: ModelManifest,
    framework: FrameworkWanted,
    hw: str,
    pending: Mapping[str, int] | None = None,
    exclude: frozenset[str] = frozenset(),
    devices: int = 1,
) -> AgentRecord:
    """The least-loaded live agent that runs ``manifest`` on ``framework`` and ``hw``.

    Load is the agent's published in-flight count plus ``pending``, what this server has sent
    it since (the registry lags behind a burst of dispatches). Ties go to the lowest id, so
    the choice is deterministic. Each failure names what the fleet does have. A model split
    over ``devices`` GPUs runs on one agent that evaluates on that many (its ranks are its
    processes): an agent pinned to one GPU (``mlms agent --gpus``) takes unsplit models only.
    """
    pending = pending or {}
    live = [a for a in agents if a.id not in exclude]
    if not live:
        raise Unavailable(
            "no live agents in the registry"
            + (f" (besides {len(exclude)} that failed this request)" if exclude else "")
            + "; start one with 'mlms agent --framework torch ...'"
        )
    models = [a for a in live if _loads(a, manifest)]
    if not models:
        raise UnsupportedFramework(
            f"no agent can run model {manifest.name!r} (it needs "
            f"{', '.join(manifest.framework_names)}); the fleet runs "
            f"{_describe(live, lambda a: f'{a.framework} {a.framework_version}')}"
        )
    frameworks = [a for a in models if framework.admits(a.framework, a.framework_version)]
    if not frameworks:
        raise UnsupportedFramework(
            f"no agent for model {manifest.name!r} runs framework "
            f"{framework.name}{framework.versions}; agents that run the model have "
            f"{_describe(models, lambda a: f'{a.framework} {a.framework_version}')}"
        )
    fit = [a for a in frameworks if serves_hw(a, hw, devices)]
    if not fit:
        split = (
            f" split over {devices} GPUs of one agent (agents started with --gpus have one each)"
            if devices > 1 and not hw.startswith("cpu")
            else ""
        )
        raise HardwareNotFound(
            f"no agent with hardware {hw!r} runs {manifest.name!r}"
            + (f" on {framework.name}" if framework.name else "")
            + split
            + f"; the fleet has {_describe(frameworks, _hardware)}"
        )
    return min(fit, key=lambda a: (a.in_flight + pending.get(a.id, 0), a.id))


def _loads(agent: AgentRecord, manifest: ModelManifest) -> bool:
    """Whether ``agent`` can run the model: a zoo model it advertises, or a library's
    architecture or a model users added (neither advertised: found on demand) that its
    framework loads."""
    if manifest.origin == "zoo" and not is_library_name(manifest.name):
        return manifest.name in agent.models
    constraint = manifest.constraint_for(agent.framework)
    return constraint is not None and constraint.admits(agent.framework_version)


def _hardware(agent: AgentRecord) -> str:
    gpus = ", ".join(f"{g.alias} (GPU {g.label})" for g in agent.usable_gpus())
    return gpus or f"cpu ({agent.hardware.cpu_brand})"


def _describe(agents: Iterable[AgentRecord], label) -> str:
    counts: dict[str, int] = {}
    for agent in agents:
        counts[label(agent)] = counts.get(label(agent), 0) + 1
    return ", ".join(f"{name} ({n} agent{'s' * (n > 1)})" for name, n in sorted(counts.items()))
