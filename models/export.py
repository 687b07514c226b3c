"""Writes the weights-only copy of a checkpoint (the files shipped in checkpoints/):

python -m ppoor.models.export runs/<run>/ckpt/<iteration>.pt checkpoints/<name>.pt
"""

import sys

from ppoor.models.checkpoints import CheckpointError, export_weights

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m ppoor.models.export SOURCE.pt TARGET.pt  (writes the weights-only checkpoint)")
    try:
        export_weights(sys.argv[1], sys.argv[2])
    except CheckpointError as exc:
        sys.exit(f"error: {exc}")
    print(f"wrote {sys.argv[2]}")
