"""Writes the weights-only copy of a checkpoint (the files shipped in checkpoints/):

python -m ppoor.models.export runs/<run>/ckpt/<iteration>.pt checkpoints/<name>.pt
python -m ppoor.models.export resume/<state>.pt <name>.pt --kept   # a railway state's best validated policy
python -m ppoor.models.export checkpoints/tsp100.pt tsp.pt --distance-prior 5   # decode with the prior at 5
"""

import argparse

from ppoor.models.checkpoints import CheckpointError, export_weights

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m ppoor.models.export", description=__doc__.splitlines()[0])
    parser.add_argument("source", help="a checkpoint or training state (.pt)")
    parser.add_argument("target", help="the weights-only file to write")
    parser.add_argument(
        "--kept", action="store_true", help="the policy a ppo_flatland.py state kept for its best validation"
    )
    parser.add_argument(
        "--distance-prior", type=float, default=None, help="the decoder's prior toward near nodes the model keeps"
    )
    args = parser.parse_args()
    try:
        export_weights(args.source, args.target, kept=args.kept, distance_prior=args.distance_prior)
    except (CheckpointError, ValueError) as exc:
        parser.exit(1, f"error: {exc}\n")
    print(f"wrote {args.target}")
