"""Create (or update) the automation that marks a flow run Crashed when its worker vanished.

A pre-empted GPU VM takes its worker with it: nobody reports the flow run's end, and it stays Running. The
`gpu` pool's flow runs send a heartbeat every ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (prefect.yaml sets
30 in its job variables); this automation marks a run Crashed when no event of it arrived for ``--within``
seconds after a heartbeat (Prefect's documented zombie detection). A distributed pipeline then re-submits the
crashed child (``distributed.max_attempts``), and a train-seed run resumes from the newest checkpoint recorded
in the run root. Run once per Prefect server (re-running updates it in place):

    PREFECT_API_URL=... python deployments/zombie_automation.py [--within 90]
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefect.automations import Automation

NAME = "rts: crash flow runs whose worker vanished"


def automation(within_s: float) -> Automation:
    """The automation (not yet saved): Crashed after ``within_s`` seconds without an event of a flow run that
    sent a heartbeat."""
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    return Automation(
        name=NAME,
        description="Flow runs whose heartbeats stopped (a pre-empted or lost worker) are marked Crashed, so a "
        "distributed RTS pipeline re-submits them (deployments/zombie_automation.py).",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.*"},  # any event of the run (a heartbeat, a state change) disarms it
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=within_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"No heartbeat for {within_s:.0f} s: the worker vanished (pre-empted or lost).",
            )
        ],
    )


def ensure(within_s: float) -> str:
    """Create the automation, or update the one of the same name; returns its id."""
    from prefect.automations import Automation
    from prefect.exceptions import ObjectNotFound

    wanted = automation(within_s)
    try:
        existing = Automation.read(name=NAME)
    except (ObjectNotFound, ValueError):
        existing = None
    if existing is None:
        return str(wanted.create().id)
    wanted.id = existing.id
    wanted.update()
    return str(existing.id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--within",
        type=float,
        default=90.0,
        help="Seconds without an event after a heartbeat before a run is marked Crashed (default 90: three "
        "missed heartbeats at PREFECT_FLOWS_HEARTBEAT_FREQUENCY=30).",
    )
    args = parser.parse_args()
    if args.within < 30:
        parser.error("--within must be at least 30 s (one heartbeat period at the smallest allowed frequency)")
    print(f"automation {NAME!r}: {ensure(args.within)}")


if __name__ == "__main__":
    main()
