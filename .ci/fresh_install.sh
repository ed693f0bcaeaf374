#!/usr/bin/env bash
# The install a stranger makes: a fresh virtual environment without the system's packages, torch from the CPU wheel,
# capgeo from the built wheel given (python -m build makes it; not the checkout, not editable), and a user's scripts
# run from an empty folder outside the checkout with capgeo's callbacks at their defaults on a tiny Hugging Face
# Llama: Lightning under max_epochs (.ci/fresh_install/lightning_llama.py), transformers.Trainer with
# report_to=["tensorboard"] (trainer_llama.py), and a training function of the user's own swept by `capgeo sweep` on a
# local Ray, run and then skipped (user_sweep.py). Each fails unless its run shows what it should.
#
#     .ci/fresh_install.sh dist/capgeo_callbacks-*.whl
set -euo pipefail
wheel="$(realpath "${1:?usage: .ci/fresh_install.sh WHEEL (python -m build writes it to dist/)}")"
scripts="$(cd "$(dirname "$0")/fresh_install" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
. "$work/venv/bin/activate"
pip install -q torch==2.13.0
pip install -q "$wheel[hf,sweep]"
mkdir "$work/user"
cp "$scripts/"*.py "$work/user/"
cd "$work/user"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
# capgeo from the environment's site-packages, not from a checkout
python -c "import capgeo_callbacks as c, sys; sys.exit(0 if '/site-packages/' in c.__file__ else f'imported from {c.__file__}')"
capgeo --help
python lightning_llama.py
python trainer_llama.py
# the sweeps ship in the wheel: a user's function over a grid on a local Ray; the second call finds both finished
capgeo sweep --help
capgeo sweep user_sweep:train --grid lr=0.003,0.01 --logdir runs/grid --jobs 2 --threads 1
python user_sweep.py runs/grid 2
capgeo sweep user_sweep:train --grid lr=0.003,0.01 --logdir runs/grid --jobs 2 --threads 1 | tee again.txt
grep -q "launch: 2 skipped" again.txt
