"""The campaign behind `simloop.verify`: one search of a loop, as a few small objects with one job each.

* `world.World`: the world's options (tools, task, limits, plans or a recording, turns, Stop, restarts) in one
  frozen value, and how one run's world is drawn from them (a new world option: a field and a draw there);
* `search.Search`: the run's options (budget, seed, invariants, out_dir, settings and database, network,
  workers) in another (a new search option: a field there);
* `schedule`: the stages cut into bounded Hypothesis runs, their settings and seeds;
* `engine.Campaign`: runs the schedule, one example a run (draw, play in a fresh `Sim`, check, tally), here or
  over worker processes (`simloop._workers`, which it gives each worker's `Share`);
* `failure.Failure`: the failure it reports: the minimal scenario file, the timeline, the replay line.

`simloop.verify` and `simloop.replay` are thin functions over these.
"""

from __future__ import annotations

from simloop._campaign.engine import Campaign
from simloop._campaign.failure import Failure
from simloop._campaign.search import Search
from simloop._campaign.world import World

__all__ = ["Campaign", "Failure", "Search", "World"]
