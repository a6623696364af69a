"""How many runners a run runs at once, for its bill and its budget (``AtOnce``): one machine's executor's count, or a
Ray cluster's by GPU type, and where the figure came from. Environments say it (a Ray cluster asks its nodes), the
executors and the run use it; so it sits below both."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Tuple

from matrixbench.run.pending import ImageWork


@dataclass(frozen=True)
class AtOnce:
    """How many runners a run runs at once, for its bill (``adaptive.bill``): ``runners`` by the group of the run's
    works they run (key None: every work; a Ray cluster's GPU type: its units run only on nodes of that type), and
    ``source``: where the figure came from, said in the bill ("": the executor's own count on this machine)."""

    runners: Mapping[Optional[str], int]
    source: str = ""

    @classmethod
    def here(cls, count: int) -> "AtOnce":
        """``count`` runners for every work (one machine's executor)."""
        return cls({None: count})

    def runners_of(self, group: Optional[str]) -> int:
        """The runners at once of the works of ``group`` (a GPU type): its own count, else every work's (key None),
        else one; a group whose nodes hold no runner counts as one (its works still run, one at a time)."""
        count = self.runners[group] if group in self.runners else self.runners.get(None, 1)
        return max(1, count)

    def groups(self, works: Sequence[ImageWork]) -> List[Tuple[List[ImageWork], int]]:
        """Each group's works (those of its GPU type; every work for None) and its runners at once (``runners_of``)."""
        return [([work for work in works if gpu_type is None or work.gpu_type == gpu_type], self.runners_of(gpu_type))
                for gpu_type in self.runners]

    def describe(self) -> str:
        """"one runner at a time", "3 runner(s) at once" (by type where there are types: "A100 2, T4 1")."""
        total = sum(self.runners.values())
        text = f"{total} runner(s) at once" if total > 1 else "one runner at a time"
        types = ", ".join(f"{gpu_type} {count}" for gpu_type, count in self.runners.items() if gpu_type is not None)
        return f"{text}: {types}" if types else text
