#!/usr/bin/env bash
# The install a stranger makes (issue 39, "Done when"): a fresh virtual environment without the system's packages,
# torch from the CPU wheel, capgeo installed (not editable) from a clean clone of this repository's HEAD, and two
# user scripts run from an empty folder outside the checkout with capgeo's callbacks at their defaults on a tiny
# Hugging Face Llama: Lightning under max_epochs (.ci/fresh_install/lightning_llama.py) and transformers.Trainer
# with report_to=["tensorboard"] (.ci/fresh_install/trainer_llama.py). Each script fails unless its run shows what
# it should.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone --quiet "$root" "$work/capgeo"
python3 -m venv "$work/venv"
. "$work/venv/bin/activate"
pip install -q torch==2.13.0 && pip install -q "$work/capgeo[hf]"
mkdir "$work/user"
cp "$work/capgeo/.ci/fresh_install/"*.py "$work/user/"
cd "$work/user"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
# capgeo from the environment's site-packages, not from a checkout
python -c "import capgeo_callbacks as c, sys; sys.exit(0 if '/site-packages/' in c.__file__ else f'imported from {c.__file__}')"
capgeo --help
python lightning_llama.py
python trainer_llama.py
