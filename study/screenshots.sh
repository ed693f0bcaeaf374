#!/usr/bin/env bash
# Screenshots of a run in a real TensorBoard server, taken with headless Chromium at TensorBoard's default
# settings (README, "The dashboard"):  study/screenshots.sh RUN_DIR OUT_DIR
set -euo pipefail
run_dir=$1; out_dir=$2; port=${PORT:-6006}
mkdir -p "$out_dir"
tensorboard --logdir "$run_dir" --port "$port" --host 127.0.0.1 >/dev/null 2>&1 &
server=$!
trap 'kill $server' EXIT
sleep 8
for page in custom_scalars images text; do
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$(mktemp -d)" --window-size=1600,1300 \
    --virtual-time-budget=25000 --screenshot="$out_dir/$page.png" "http://127.0.0.1:$port/#$page" 2>/dev/null
done
