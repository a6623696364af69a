# Makes sure the base image has what the benchmark needs, installing with apt only what is
# missing: the interpreter $1 with venv and its headers (Python.h), gcc, g++ and libc headers.
set -eu
python="$1"
missing=""
command -v gcc >/dev/null 2>&1 || missing="$missing gcc libc6-dev"
command -v g++ >/dev/null 2>&1 || missing="$missing g++"
if ! command -v "$python" >/dev/null 2>&1; then
  missing="$missing $python $python-dev $python-venv"
else
  "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || missing="$missing $python-dev"
  "$python" -c 'import ensurepip, venv' 2>/dev/null || missing="$missing $python-venv"
fi
if [ -z "$missing" ]; then
  echo "toolchain: $python, gcc, g++ and Python.h present"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "toolchain: missing$missing and the base image has no apt-get; pick a Debian/Ubuntu base or one with these" >&2
  exit 1
fi
echo "toolchain: installing$missing"
apt-get update
apt-get install -y --no-install-recommends $missing
rm -rf /var/lib/apt/lists/*
