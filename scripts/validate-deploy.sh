#!/usr/bin/env bash
# Validates deploy/ without a cluster (scripts/validate_deploy.py says what is checked), after
# installing what that needs:
#   - promtool, from Debian's `prometheus` package (apt-get, as root or through `sudo -n`);
#   - a Python virtual environment in target/deploy-venv (or $VGPU_DEPLOY_VENV) holding the
#     pinned packages of scripts/deploy-requirements.txt, from PyPI.
# Exit status: 0 everything passed; 1 a check failed; 77 a tool could not be installed (the
# reason is printed): crates/vgpu-tests/tests/deploy.rs skips on 77 unless CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${VGPU_DEPLOY_VENV:-target/deploy-venv}
python=${PYTHON:-python3}

unavailable() {
  echo "validate-deploy: cannot run: $*" >&2
  exit 77
}

# One installer at a time (tests may run this script in parallel).
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt=(apt-get)
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    apt=(sudo -n apt-get)
  else
    unavailable "promtool is missing and apt-get needs root: install Debian's prometheus package"
  fi
  echo "validate-deploy: installing promtool (Debian package prometheus)" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! "${apt[@]}" install -y -qq --no-install-recommends prometheus >&2; then
    "${apt[@]}" update -qq >&2 \
      && "${apt[@]}" install -y -qq --no-install-recommends prometheus >&2 \
      || unavailable "apt-get install prometheus failed"
  fi
fi

command -v "$python" >/dev/null 2>&1 || unavailable "no $python"
stamp="$venv/requirements.txt"
if ! cmp -s scripts/deploy-requirements.txt "$stamp"; then
  echo "validate-deploy: installing the validators into $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv" >&2 || unavailable "$python -m venv failed (Debian: apt-get install python3-venv)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r scripts/deploy-requirements.txt >&2 \
    || { rm -rf "$venv"; unavailable "pip install -r scripts/deploy-requirements.txt failed"; }
  cp scripts/deploy-requirements.txt "$stamp"
fi
flock -u 9
exec 9>&-

exec "$venv/bin/python" scripts/validate_deploy.py --self-test "$@"
