#!/usr/bin/env bash
# The example trainer (docker/trainer/) on a real GPU: the checks no CPU-only test can make.
#
#   scripts/gpu-check.sh            # PYTHON=/path/to/python to pick the interpreter
#
# Needs a machine with an NVIDIA GPU, its driver, and a Python with torch (CUDA build) and
# wandb (pip install -r docker/trainer/requirements.txt). Uses the trainer's files only: no
# Airflow, no cluster, no network (W&B is disabled). The CPU stand-ins take about 1.5 minutes
# on 2 busy cores (not yet run on a GPU); a check still running at 5 minutes is stopped and
# fails. It runs, each ending in a PASS or FAIL line:
#
#   1. one process on CUDA (python train.py);
#   2. torchrun with one process per GPU, started as the image starts it (python launch.py);
#   3. a CPU rank and a GPU rank that disagree on the backend: both exit, naming it, in seconds;
#   4. a SIGTERM while training on the GPU, then a resume from its checkpoint: 0 steps repeated;
#   5. the progress lines (AVW_PROGRESS, one per epoch): at least two, with rising steps;
#   6. PET_NPROC_PER_NODE above the GPU count: refused by launch.py, naming both counts.
#
# Exit codes: 0 every check passed on a GPU; 1 a check failed; 2 it could not run (no torch
# or wandb); 3 torch sees no GPU here, so the GPU checks did NOT run: the same checks ran on
# CPU as stand-ins (2 ranks over gloo; the refusal with a simulated GPU count), which is never
# a pass. Logs go to a temporary directory, kept (and named) when a check fails or with
# AVW_GPU_CHECK_KEEP=1. Docs: docs/trainer.md, "Check on a GPU".
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRAINER=$REPO/docker/trainer
PYTHON=${PYTHON:-python3}
EPOCHS=3          # checks 1 and 5: 3 epochs of 64 steps (seconds on any machine)
LONG_EPOCHS=100   # check 4: 6,400 steps, so the SIGTERM after epoch 1 lands mid-training
EXIT_FAILED=1
EXIT_CANNOT_RUN=2
EXIT_NO_GPU=3
KEEP=${AVW_GPU_CHECK_KEEP:-} # read before the AVW_* env is cleared below

case "${1:-}" in
  -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "usage: $0 (no arguments; PYTHON=... picks the interpreter)" >&2; exit "$EXIT_CANNOT_RUN" ;;
esac

# Nothing of the caller's job env may leak into the "pods" started here.
while read -r name; do
  case $name in
    PET_* | TRAIN_* | AVW_* | WANDB_* | TORCHELASTIC_* | MASTER_ADDR | MASTER_PORT | RANK | \
      WORLD_SIZE | LOCAL_RANK | LOCAL_WORLD_SIZE | GROUP_RANK) unset "$name" ;;
  esac
done < <(compgen -e)

# An absolute interpreter: the checks run in a directory of their own.
if [[ $PYTHON == */* ]]; then
  PYTHON=$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")
elif found=$(command -v "$PYTHON"); then
  PYTHON=$found
else
  echo "CANNOT RUN: no $PYTHON on PATH (set PYTHON=...)" >&2
  exit "$EXIT_CANNOT_RUN"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/avw-gpu-check.XXXXXX") || exit "$EXIT_CANNOT_RUN"
export WANDB_MODE=disabled WANDB_DIR=$WORK PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
cd "$WORK" || exit "$EXIT_CANNOT_RUN"

STARTED=()   # process groups started here, killed on the way out
SETSID=setsid
command -v setsid >/dev/null || SETSID=
cleanup() {
  local pid
  for pid in "${STARTED[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; done
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

# ---- the machine --------------------------------------------------------------------------

if ! info=$("$PYTHON" - 2>"$WORK/preflight.log" <<'EOF'
import warnings
warnings.simplefilter("ignore")
import torch
import wandb  # noqa: F401  rank 0 calls wandb.init, disabled here
count = torch.cuda.device_count()
names = ", ".join(torch.cuda.get_device_name(i) for i in range(count)) if count else "none"
print(count)
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), wandb {wandb.__version__}, "
      f"{count} GPU(s): {names}")
EOF
); then
  echo "CANNOT RUN: $PYTHON cannot import torch and wandb (pip install -r" \
    "docker/trainer/requirements.txt, or set PYTHON=...):" >&2
  tail -n 5 "$WORK/preflight.log" >&2
  rm -rf "$WORK"
  exit "$EXIT_CANNOT_RUN"
fi
GPUS=$(head -n 1 <<<"$info")
echo "gpu-check: $PYTHON: $(tail -n 1 <<<"$info")"
if ((GPUS > 0)); then
  MODE=gpu
  DEVICE=cuda
else
  MODE=cpu
  DEVICE=cpu
  echo "gpu-check: NO GPU: torch sees none, so the GPU checks will NOT run; the same checks" \
    "run on CPU as stand-ins, and the script exits $EXIT_NO_GPU (never a pass)"
fi
echo "gpu-check: logs in $WORK"

# ---- helpers ------------------------------------------------------------------------------

FAILED=0
CHECKS=0
REASON=""
DEADLINE=$((SECONDS + 290)) # all the checks, so the script ends within 5 minutes

check() { # NAME FUNCTION: run one check, print its PASS or FAIL line
  local name=$1 t0=$SECONDS
  shift
  [[ $MODE == cpu ]] && name="$name [CPU stand-in, not a GPU check]"
  REASON=""
  CHECKS=$((CHECKS + 1))
  if ((SECONDS >= DEADLINE)); then
    FAILED=$((FAILED + 1))
    echo "FAIL  $name: not run, the 5 minutes were spent"
  elif "$@"; then
    echo "PASS  $name ($((SECONDS - t0)) s${REASON:+: $REASON})"
  else
    FAILED=$((FAILED + 1))
    echo "FAIL  $name ($((SECONDS - t0)) s): $REASON"
  fi
}

why() { # LOG MESSAGE: the failure's reason, with the log's last lines
  REASON="$2 (log $1)"$'\n'"$(tail -n 15 "$1" 2>/dev/null | sed 's/^/      | /')"
  return 1
}

start() { # LOG CMD...: CMD in the background, in a process group of its own; sets PID
  local log=$1
  shift
  # Not a group leader (no job control here), setsid execs CMD itself: PID is CMD's.
  $SETSID "$@" >"$log" 2>&1 &
  PID=$!
  STARTED+=("$PID")
}

finish() { # PID LIMIT_S: wait for PID (killing its group after LIMIT_S: 124); sets RC
  local pid=$1 limit=$(($2 * 10)) waited=0
  # Never past the whole run's deadline.
  ((limit > (DEADLINE - SECONDS) * 10)) && limit=$(((DEADLINE - SECONDS) * 10))
  while kill -0 "$pid" 2>/dev/null && ((waited < limit)); do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    RC=124
  else
    wait "$pid"
    RC=$?
  fi
}

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

progress_lines() { # LOG: the AVW_PROGRESS records, checked: >= 2, steps rising, last = total
  "$PYTHON" - "$1" <<'EOF'
import json, sys
records = [json.loads(line.split(" ", 1)[1]) for line in open(sys.argv[1])
           if line.startswith("AVW_PROGRESS ")]
steps = [r["step"] for r in records]
if len(records) < 2:
    sys.exit(f"{len(records)} AVW_PROGRESS line(s), not at least 2")
if any(b <= a for a, b in zip(steps, steps[1:])):
    sys.exit(f"the steps do not rise: {steps}")
if steps[-1] != records[-1]["total_steps"]:
    sys.exit(f"the last step {steps[-1]} is not total_steps {records[-1]['total_steps']}")
print(f"{len(records)} lines, steps {steps} of {records[-1]['total_steps']}")
EOF
}

# ---- the checks ---------------------------------------------------------------------------

check_one_process() {
  local log=$WORK/1-one-process.log
  start "$log" "$PYTHON" "$TRAINER/train.py" --epochs "$EPOCHS"
  finish "$PID" 120
  ((RC == 0)) || { why "$log" "exit $RC"; return; }
  local device=$DEVICE
  [[ $MODE == gpu ]] && device=cuda:0
  grep -q "^\[rank 0/1\] device=$device " "$log" || { why "$log" "no 'device=$device' line"; return; }
  grep -q '^AVW_TRAIN_RESULT ' "$log" || why "$log" "no AVW_TRAIN_RESULT line"
}

check_torchrun() {
  local log=$WORK/2-torchrun.log nproc world rank port
  port=$(free_port)
  if [[ $MODE == gpu ]]; then
    # One GPU: "gpu" still goes through torchrun (which counts the GPUs); a number would be
    # one process per pod, without torchrun.
    nproc=gpu
    ((GPUS > 1)) && nproc=$GPUS
    world=$GPUS
  else
    nproc=2 # no GPU: as many processes as asked, on CPU over gloo (as before the refusal)
    world=2
  fi
  start "$log" env PET_NPROC_PER_NODE="$nproc" PET_NNODES=1 PET_NODE_RANK=0 \
    PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT="$port" "$PYTHON" "$TRAINER/launch.py" --epochs 2
  finish "$PID" 180
  ((RC == 0)) || { why "$log" "exit $RC"; return; }
  grep -q "^avw-launch: PET_NPROC_PER_NODE=$nproc PET_NODE_RANK=0: -m torch.distributed.run" \
    "$log" || { why "$log" "launch.py did not start torchrun"; return; }
  for ((rank = 0; rank < world; rank++)); do
    local device=$DEVICE
    [[ $MODE == gpu ]] && device=cuda:$rank
    grep -q "\[rank $rank/$world\] device=$device " "$log" ||
      { why "$log" "no '[rank $rank/$world] device=$device' line"; return; }
    grep -q "\[rank $rank/$world\] epoch 2/2" "$log" ||
      { why "$log" "rank $rank did not train 2 epochs"; return; }
  done
  if ((world > 1)); then
    local backend=gloo
    [[ $MODE == gpu ]] && backend=nccl
    grep -q "joining $backend process group" "$log" || why "$log" "no $backend process group"
  fi
}

check_backend_disagreement() {
  local port t0=$SECONDS pids=() rank log
  port=$(free_port)
  local -a ranks=(
    # rank 0 sees no GPU (gloo), rank 1 the GPU (nccl); without a GPU, TRAIN_BACKEND says so
    "CUDA_VISIBLE_DEVICES= TRAIN_BACKEND=auto"
    "TRAIN_BACKEND=auto"
  )
  [[ $MODE == cpu ]] && ranks=("TRAIN_BACKEND=gloo" "TRAIN_BACKEND=nccl")
  for rank in 0 1; do
    # shellcheck disable=SC2086 # the rank's env words
    start "$WORK/3-disagree-rank-$rank.log" env ${ranks[$rank]} MASTER_ADDR=127.0.0.1 \
      MASTER_PORT="$port" WORLD_SIZE=2 RANK=$rank TRAIN_DIST_TIMEOUT=120 \
      "$PYTHON" "$TRAINER/train.py" --epochs 1
    pids+=("$PID")
  done
  for rank in 0 1; do
    log=$WORK/3-disagree-rank-$rank.log
    finish "${pids[$rank]}" 90
    ((RC != 0 && RC != 124)) || { why "$log" "rank $rank: exit $RC, not a clear failure"; return; }
    grep -q "ranks disagree on the torch.distributed backend (rank 0: gloo, rank 1: nccl)" \
      "$log" || { why "$log" "rank $rank does not name the disagreement"; return; }
  done
  # Interpreter, torch and CUDA start-up included; the hang it replaces lasts the timeout.
  if ((SECONDS - t0 > 60)); then
    REASON="both ranks exited, but after $((SECONDS - t0)) s"
    return 1
  fi
  REASON="both exited naming it"
}

check_sigterm_resume() {
  local log=$WORK/4-sigterm.log again=$WORK/4-resume.log waited=0 stopped resumed
  local -a env=(env AVW_CHECKPOINT_DIR="$WORK/checkpoints" AVW_RESUME_FROM=latest)
  start "$log" "${env[@]}" "$PYTHON" "$TRAINER/train.py" --epochs "$LONG_EPOCHS"
  # The first progress line: training runs (a SIGTERM now waits for the step in progress).
  until grep -q '^AVW_PROGRESS ' "$log"; do
    if ! kill -0 "$PID" 2>/dev/null || ((waited >= 1200 || SECONDS >= DEADLINE)); then
      finish "$PID" 1
      why "$log" "no progress line to stop after (exit $RC)"
      return
    fi
    sleep 0.05
    waited=$((waited + 1))
  done
  kill -TERM "$PID"
  finish "$PID" 60
  ((RC == 143)) || { why "$log" "exit $RC after SIGTERM, not 143"; return; }
  stopped=$(sed -n 's/.*stopping after step \([0-9]*\): asked to stop (SIGTERM).*/\1/p' "$log")
  [[ -n $stopped ]] || { why "$log" "no 'stopping after step N' line"; return; }
  grep -q "saved checkpoint .*step-$(printf %09d "$stopped").pt" "$log" ||
    { why "$log" "step $stopped was not saved"; return; }
  start "$again" "${env[@]}" "$PYTHON" "$TRAINER/train.py" --epochs "$LONG_EPOCHS"
  finish "$PID" 180
  ((RC == 0)) || { why "$again" "the resumed run: exit $RC"; return; }
  resumed=$(sed -n 's/.*resumed from step \([0-9]*\) (checkpoint .*/\1/p' "$again")
  [[ -n $resumed ]] || { why "$again" "no 'resumed from step N' line"; return; }
  ((resumed == stopped)) ||
    { why "$again" "stopped after step $stopped, resumed from step $resumed"; return; }
  for file in "$log" "$again"; do
    grep -q "^\[rank 0/1\] device=$DEVICE" "$file" || { why "$file" "not on $DEVICE"; return; }
  done
  local steps
  steps=$("$PYTHON" - "$again" "$stopped" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
progress = [json.loads(x.split(" ", 1)[1]) for x in lines if x.startswith("AVW_PROGRESS ")]
result = [json.loads(x.split(" ", 1)[1]) for x in lines if x.startswith("AVW_TRAIN_RESULT ")]
if not progress or not result:
    sys.exit("no AVW_PROGRESS or AVW_TRAIN_RESULT line")
if progress[0]["step"] <= int(sys.argv[2]):
    sys.exit(f"the resumed run's first epoch ends at step {progress[0]['step']}")
if result[0]["train/steps"] != progress[-1]["total_steps"]:
    sys.exit(f"ended at step {result[0]['train/steps']} of {progress[-1]['total_steps']}")
print(progress[-1]["total_steps"])
EOF
  ) || { why "$again" "$steps"; return; }
  REASON="stopped after step $stopped, resumed from it, finished all $steps"
}

check_progress() {
  local log=$WORK/1-one-process.log out
  out=$(progress_lines "$log" 2>&1) || { why "$log" "$out"; return; }
  REASON=$out
}

check_refusal() {
  local log=$WORK/6-refused.log asked=$((GPUS + 1)) want
  if [[ $MODE == cpu ]]; then
    # No GPU, so nothing to refuse for real (CPU processes run as asked, as in check 2): the
    # launcher's own decision, told that the pod has 1 GPU.
    asked=2
    want="PET_NPROC_PER_NODE=2 asks for 2 processes in this pod, but it has 1 GPU "
    "$PYTHON" - "$TRAINER/launch.py" >"$log" 2>&1 <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("launch", sys.argv[1])
launch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(launch)
try:
    launch.launch({"PET_NPROC_PER_NODE": "2"}, [], sys.executable, gpus=lambda: 1)
except SystemExit as refused:
    print(refused.code)
    sys.exit(1)
print("not refused")
EOF
    RC=$?
  else
    local plural=s
    ((GPUS == 1)) && plural=
    want="PET_NPROC_PER_NODE=$asked asks for $asked processes in this pod, but it has $GPUS GPU$plural "
    start "$log" env PET_NPROC_PER_NODE="$asked" PET_NNODES=1 PET_NODE_RANK=0 \
      PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT="$(free_port)" \
      "$PYTHON" "$TRAINER/launch.py" --epochs 1
    finish "$PID" 60
  fi
  ((RC != 0 && RC != 124)) || { why "$log" "exit $RC: not refused"; return; }
  grep -qF "$want" "$log" || { why "$log" "no message naming both counts ('$want')"; return; }
  if grep -q 'torch.distributed.run\|^\[rank ' "$log"; then
    why "$log" "a process was started before the refusal"
  fi
}

check "one process on $DEVICE (train.py)" check_one_process
if [[ $MODE == gpu ]]; then
  check "torchrun with one process per GPU ($GPUS), started by launch.py" check_torchrun
else
  check "torchrun with PET_NPROC_PER_NODE=2 on CPU, started by launch.py" check_torchrun
fi
check "a CPU rank (gloo) and a GPU rank (nccl) disagree: both exit, naming it" \
  check_backend_disagreement
check "SIGTERM on $DEVICE, then resume from the checkpoint: 0 steps repeated" check_sigterm_resume
check "progress lines: AVW_PROGRESS each epoch, steps rising" check_progress
check "PET_NPROC_PER_NODE above the GPU count is refused before any rank starts" check_refusal

# ---- the verdict --------------------------------------------------------------------------

if ((FAILED > 0)); then
  echo "gpu-check: FAILED: $FAILED of $CHECKS checks failed (logs kept in $WORK)"
  [[ $MODE == cpu ]] && echo "gpu-check: and the GPU checks did NOT run (no GPU here)"
  exit "$EXIT_FAILED"
fi
[[ $KEEP == 1 ]] || rm -rf "$WORK"
if [[ $MODE == cpu ]]; then
  echo "gpu-check: NOT A GPU CHECK: torch sees no GPU here, so the GPU checks did NOT run."
  echo "gpu-check: the $CHECKS CPU stand-ins passed; exit $EXIT_NO_GPU. Run it on a GPU machine."
  exit "$EXIT_NO_GPU"
fi
echo "gpu-check: all $CHECKS checks passed on $GPUS GPU(s)"
exit 0
