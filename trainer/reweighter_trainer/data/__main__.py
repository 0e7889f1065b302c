"""Regenerate the shipped arithmetic set: python -m reweighter_trainer.data"""

import json
from pathlib import Path

from reweighter_trainer.data import ARITH_FILE, generate_arith

out = Path(__file__).parent / ARITH_FILE
out.write_text("".join(json.dumps(r) + "\n" for r in generate_arith()))
print(f"wrote {out}")
