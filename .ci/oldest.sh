#!/usr/bin/env bash
# The oldest frameworks pyproject.toml allows (lightning>=2.4, transformers>=4.40), beside the same torch: a second
# virtual environment (.venv-oldest) with Lightning 2.4 and transformers 4.40, and there the tests of the code that
# meets the frameworks: the compatibility module (capgeo_callbacks/integrations/compat.py), the evaluation schedule,
# Lightning's loggers, features and checkpoints, the LLC monitor's copy of a LightningModule, LightningCLI, and the
# transformers.Trainer callback with its loggers. A lower bound in pyproject.toml rises only to a version passing here.
#
#     .ci/oldest.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-oldest
. .venv-oldest/bin/activate
pip install -q torch==2.13.0
pip install -q "lightning==2.4.*" "transformers==4.40.*" -e ".[dev]"
python -c "import lightning, transformers; print('oldest allowed: lightning', lightning.__version__, '/ transformers', transformers.__version__)"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
# DDP on CPU (tests/callbacks/test_compatibility.py) is left to the newest versions: it alone would double the time
python -m pytest -q -p no:cacheprovider \
    tests/integrations/test_compat.py tests/callbacks/test_evaluation_schedule.py \
    tests/callbacks/test_compatibility.py tests/callbacks/test_llc_monitor.py tests/callbacks/test_lightning_cli.py \
    tests/integrations/test_hf.py tests/integrations/test_hf_loggers.py -k "not ddp"
