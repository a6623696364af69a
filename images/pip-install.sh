# pip install (or download) with an image's index settings: the one pip logic of both the
# Docker build (into /opt/venv) and the venv backend (matrixbench/build/venvs.py, into a host venv).
#   pip-install.sh torch   TORCH_SPEC from TORCH_INDEX_URL (when set) or INDEX_URL
#   pip-install.sh rest    TORCH_SPEC TRANSFORMERS_SPEC pillow scipy nvidia-ml-py==NVML EXTRA_PINS
#                          from INDEX_URL
# (scipy: Mask2Former/MaskFormer build their Hungarian matcher at init. nvidia-ml-py: the runner
# reads GPU clocks, temperature, power and throttle reasons around each timed loop (import
# pynvml; absent -> null fields).)
# Reads the build args TORCH_SPEC, TRANSFORMERS_SPEC, EXTRA_PINS (space-separated), INDEX_URL,
# EXTRA_INDEX_URLS (space-separated), TORCH_INDEX_URL (empty: INDEX_URL) and, when set:
#   FIND_LINKS   space-separated wheelhouses (folders or URLs) pip looks in first
#   PIP_ACTION   the pip subcommand and its options (default "install"), e.g.
#                "download --dest DIR" to fill a wheelhouse instead of installing
#   CA_BUNDLE    the CA bundle to trust (default /opt/matrixbench/ca-bundle.crt), used when
#                not empty (TLS-inspecting proxies)
#   PIP          the pip command (default: the `pip` first on PATH, the venv's)
# `python` is the one first on PATH: the venv's.
set -euf  # -f: no globbing of requirements such as "numpy==1.*"
layer="$1"
if [ "$layer" = torch ]; then
  set -- "$TORCH_SPEC"
else
  # nvidia-ml-py pinned: every image reads NVML through the same bindings (newer bindings run on older
  # drivers; a function a driver lacks raises and its field is null).
  set -- "$TORCH_SPEC" "$TRANSFORMERS_SPEC" pillow scipy nvidia-ml-py==13.615.71 $EXTRA_PINS
fi
ca="${CA_BUNDLE:-/opt/matrixbench/ca-bundle.crt}"
set -- "$@" --progress-bar off
[ -s "$ca" ] && set -- "$@" --cert "$ca"
for url in ${FIND_LINKS:-}; do
  set -- "$@" --find-links "$url"
done
for url in $EXTRA_INDEX_URLS; do
  set -- "$@" --extra-index-url "$url"
done
if [ "$layer" = torch ] && [ -n "$TORCH_INDEX_URL" ]; then
  set -- "$@" --index-url "$TORCH_INDEX_URL" --extra-index-url "$INDEX_URL"
else
  set -- "$@" --index-url "$INDEX_URL"
fi
action="${PIP_ACTION:-install}"
# shellcheck disable=SC2086  # PIP and PIP_ACTION are words on purpose
if [ "$action" = install ] && [ -n "${FIND_LINKS:-}" ]; then
  # The wheelhouse first, offline: pip's resolver prefers an index's copy of a wheel the
  # wheelhouse also holds, and would download it again.
  ${PIP:-pip} install --no-index "$@" || {
    echo "pip-install.sh: the wheelhouse lacks some of these; installing from the indexes"
    ${PIP:-pip} install "$@"
  }
else
  ${PIP:-pip} $action "$@"
fi
if [ "$action" = install ] && [ "$layer" = rest ] && [ -s "$ca" ]; then
  # Run time (hub downloads through the same proxy): requests/httpx trust certifi's bundle.
  python -c 'import certifi' 2>/dev/null && cat "$ca" >> "$(python -c 'import certifi; print(certifi.where())')"
fi
exit 0
