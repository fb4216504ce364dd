#!/usr/bin/env bash
# ctest's entry for the reference's own tests (unittest, in this folder):
#   run_unittests.sh test_kda.TestKDA [more test names]
# Runs them with the first Python that has torch and numpy: $DS_PYTHON, /usr/bin/python3 (where
# Debian's python3-torch lives, which scripts/setup installs), then python3 on PATH. Without one
# it skips (exit 77, the entries' SKIP_RETURN_CODE), except under CI (CI=true), where a missing
# torch means the reference went untested: there it fails.
set -uo pipefail
cd "$(dirname "$0")"
py=""
for cand in "${DS_PYTHON:-}" /usr/bin/python3 python3; do
  [[ -n $cand ]] && command -v "$cand" >/dev/null 2>&1 || continue
  # find_spec looks the modules up without importing torch (which takes seconds).
  if "$cand" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("torch") and u.find_spec("numpy")))' 2>/dev/null; then
    py=$cand
    break
  fi
done
if [[ -z $py ]]; then
  echo "no Python with torch and numpy found (tried \$DS_PYTHON, /usr/bin/python3, python3; scripts/setup installs python3-torch)" >&2
  if [[ ${CI:-} == true || ${CI:-} == 1 ]]; then
    echo "CI=true: a missing dependency is a failure" >&2
    exit 1
  fi
  exit 77
fi
echo "using $py" >&2
exec "$py" -m unittest -v "$@"
