"""`python -m bench <verb>`: the benchmarks and the soak, each a subcommand.

    python -m bench dispatch --quick      # the dispatcher against the raw-copy floor
    python -m bench peer --quick          # the dispatcher beside Kueue's MultiKueue
    python -m bench soak --minutes 20     # faults for a long time, then the invariants
    python -m bench chain-cost            # the real Trainer chain's memory and CPU
    python -m bench fleet                 # one dispatcher and 10, 25, 50 lean workers

`python -m bench <verb> --help` lists each one's options.
"""

from __future__ import annotations

import argparse

from bench import chain_cost
from bench.dispatch import cli as dispatch_cli
from bench.fleet import cli as fleet_cli
from bench.peer import cli as peer_cli
from bench.soak import cli as soak_cli

VERBS = {"dispatch": dispatch_cli, "peer": peer_cli, "soak": soak_cli,
         "chain-cost": chain_cost, "fleet": fleet_cli}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    for name, module in VERBS.items():
        sub = verbs.add_parser(name, help=module.SUMMARY, description=module.__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(sub)
        sub.set_defaults(run=module.run)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
