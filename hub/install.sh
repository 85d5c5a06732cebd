#!/usr/bin/env bash
# The course environment for `make hub`, as root: everything every user must read lives under PREFIX (not under a
# home folder), the hub's own state under PREFIX/state (root only), nbgrader's exchange at EXCHANGE.
#   bash hub/install.sh PREFIX EXCHANGE
set -euo pipefail
PREFIX=${1:?usage: hub/install.sh PREFIX EXCHANGE}
EXCHANGE=${2:?usage: hub/install.sh PREFIX EXCHANGE}
REPO=$(cd "$(dirname "$0")/.." && pwd)
# an interpreter every user can run: a venv links to its base Python, so one under root's home (pyenv's,
# mode 700) would leave every learner's server unable to start; Debian's /usr/bin/python3.11 will do
runnable() { runuser -u nobody -- "$1" -c 'import venv' >/dev/null 2>&1; }
PYTHON=
for candidate in ${HUB_PYTHON:-} "$(command -v python3.11 || true)" /usr/bin/python3.11 /usr/local/bin/python3.11; do
  if [ -n "$candidate" ] && [ -x "$candidate" ] && runnable "$candidate"; then PYTHON=$candidate; break; fi
done
[ -n "$PYTHON" ] || { echo "no Python 3.11 that every user can run (set HUB_PYTHON=/path/to/python3.11)" >&2; exit 2; }
CHP_VERSION=5.3.0          # configurable-http-proxy, from npm
JUPYTERHUB_VERSION=6.1.1
CULLER_VERSION=2.0.0       # jupyterhub-idle-culler, the hub service that stops idle servers

[ "$(id -u)" = 0 ] || { echo "make hub needs root: it installs into $PREFIX and its users' servers run as them" >&2; exit 2; }
command -v npm >/dev/null || { echo "make hub needs Node.js and npm for configurable-http-proxy (apt-get install nodejs npm)" >&2; exit 2; }
umask 022
mkdir -p "$PREFIX"

# the course package itself (not an editable link into this checkout), JupyterHub, the servelab kernel;
# redone when the package's sources changed since the last install. Compiled to bytecode here: the users
# cannot write into the venv, and without .pyc files every nbgrader command and lab server they start
# would compile its imports again (about 5 s each)
stamp="$PREFIX/.installed"
if [ -x "$PREFIX/venv/bin/python" ] && ! runnable "$PREFIX/venv/bin/python"; then rm -rf "$PREFIX/venv" "$stamp"; fi
if [ ! -f "$stamp" ] || [ -n "$(find "$REPO/pyproject.toml" "$REPO/hub/install.sh" "$REPO/lib" "$REPO/autograder" -newer "$stamp" -print -quit)" ]; then
  echo "installing the course environment into $PREFIX/venv (log: $PREFIX/pip.log)"
  [ -x "$PREFIX/venv/bin/python" ] || "$PYTHON" -m venv "$PREFIX/venv"
  "$PREFIX/venv/bin/python" -m pip install -q --upgrade "$REPO" "jupyterhub==$JUPYTERHUB_VERSION" \
    "jupyterhub-idle-culler==$CULLER_VERSION" \
    >"$PREFIX/pip.log" 2>&1 || { tail -40 "$PREFIX/pip.log"; exit 1; }
  "$PREFIX/venv/bin/python" -m ipykernel install --sys-prefix --name servelab --display-name "Python (servelab)" >/dev/null
  "$PREFIX/venv/bin/python" "$REPO/scripts/kernelspec.py"     # the kernel's %check magic
  touch "$stamp"
fi
if [ ! -x "$PREFIX/node_modules/.bin/configurable-http-proxy" ]; then
  echo "installing configurable-http-proxy $CHP_VERSION into $PREFIX/node_modules"
  npm install --silent --no-fund --no-audit --prefix "$PREFIX" "configurable-http-proxy@$CHP_VERSION" >/dev/null
fi

# the learner lab (no instructor tools), read by every learner's server
rm -rf "$PREFIX/lab" && mkdir -p "$PREFIX/lab" && cp -r "$REPO/lab/learner" "$PREFIX/lab/learner"

# the course root a learner's %check grades against (SERVELAB_ROOT of their server): the repository's public parts
# (chapters, release, grading tables and known-wrong patches, the library the sandbox mounts), read-only; no
# gradebook, no submissions: those stay in the instructor's course folder
rm -rf "$PREFIX/root" && mkdir -p "$PREFIX/root/autograder" "$PREFIX/root/bench"
cp -r "$REPO/solutions" "$REPO/course" "$REPO/lib" "$REPO/pyproject.toml" "$REPO/nbgrader_config.py" "$PREFIX/root/"
cp -r "$REPO/autograder/servelab_autograder" "$REPO/autograder/known_wrong" "$REPO/autograder/mutants" \
  "$REPO/autograder/nbgrader_config.py" "$PREFIX/root/autograder/"
cp "$REPO/bench/kernels_results.md" "$PREFIX/root/bench/"
find "$PREFIX/root" -name __pycache__ -prune -exec rm -rf {} +

# nbgrader's exchange: everyone may write into it (nbgrader's own docs: chmod ugo+rw); nbgrader makes the
# course's inbound and feedback folders unlistable and names what is in them by secrets
mkdir -p "$EXCHANGE" && chmod ugo+rw "$EXCHANGE"
mkdir -p "$PREFIX/venv/etc/jupyter"
cat >"$PREFIX/venv/etc/jupyter/nbgrader_config.py" <<CONFIG
# servelab's course on this hub (written by hub/install.sh): every user's nbgrader finds the exchange here
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "servelab"
c.Exchange.root = "$EXCHANGE"
CONFIG
mkdir -p "$PREFIX/state" && chmod 700 "$PREFIX/state"
chmod -R a+rX "$PREFIX/venv" "$PREFIX/lab" "$PREFIX/root" "$PREFIX/node_modules"
echo "hub environment ready: $PREFIX (exchange $EXCHANGE)"
