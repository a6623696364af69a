# pip install into /opt/venv with the build's index settings.
#   pip-install.sh torch SPEC        torch from TORCH_INDEX_URL (when set) or INDEX_URL
#   pip-install.sh rest REQ...       everything else from INDEX_URL
# Reads the build args INDEX_URL, EXTRA_INDEX_URLS, TORCH_INDEX_URL; trusts
# /opt/matrixbench/ca-bundle.crt when it is not empty (TLS-inspecting proxies).
set -euf  # -f: no globbing of requirements such as "numpy==1.*"
layer="$1"
shift
ca=/opt/matrixbench/ca-bundle.crt
set -- "$@" --progress-bar off
[ -s "$ca" ] && set -- "$@" --cert "$ca"
for url in $EXTRA_INDEX_URLS; do
  set -- "$@" --extra-index-url "$url"
done
if [ "$layer" = torch ] && [ -n "$TORCH_INDEX_URL" ]; then
  set -- "$@" --index-url "$TORCH_INDEX_URL" --extra-index-url "$INDEX_URL"
else
  set -- "$@" --index-url "$INDEX_URL"
fi
pip install "$@"
if [ "$layer" = rest ] && [ -s "$ca" ]; then
  # Run time (hub downloads through the same proxy): requests/httpx trust certifi's bundle.
  python -c 'import certifi' 2>/dev/null && cat "$ca" >> "$(python -c 'import certifi; print(certifi.where())')"
fi
exit 0
