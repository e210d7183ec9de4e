# scripts/lib.sh: helpers the scripts share (sourced, not run).

# The CUDA toolkit may be installed without being on PATH.
for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do
  if [ -x "$d/nvcc" ] && ! command -v nvcc >/dev/null 2>&1; then export PATH="$PATH:$d"; fi
done

ARK_MISSING=()
# need CHECK PACKAGE: queue a Debian package for installation when CHECK (a shell test) fails.
need() {
  if ! eval "$1" >/dev/null 2>&1; then ARK_MISSING+=("$2"); fi
}

# Installs the queued packages with apt-get. Without apt-get (or root), says what is missing and
# goes on: the build then does without what it cannot find.
install_missing() {
  [ ${#ARK_MISSING[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "ark: cannot install ${ARK_MISSING[*]} (not root, no sudo)" >&2
      return 0
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "ark: cannot install ${ARK_MISSING[*]} (no apt-get)" >&2
    return 0
  fi
  echo "ark: installing ${ARK_MISSING[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo apt-get install -y -q --no-install-recommends "${ARK_MISSING[@]}" >/tmp/ark-apt.log 2>&1; then
    $sudo apt-get update -q >>/tmp/ark-apt.log 2>&1
    $sudo apt-get install -y -q --no-install-recommends "${ARK_MISSING[@]}" >>/tmp/ark-apt.log 2>&1 ||
      { tail -20 /tmp/ark-apt.log >&2; return 1; }
  fi
  ARK_MISSING=()
}

# Number of NVIDIA GPUs visible (0 without a driver).
gpu_count() {
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  echo "${n:-0}"
}

# meson setup, or reconfigure an existing build directory with the same options.
configure() {
  local dir=$1
  shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}
