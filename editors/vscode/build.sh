#!/usr/bin/env bash
# Build the trainfix VS Code extension (.vsix), entirely outside the clone, so `git status` stays clean:
#
#   bash editors/vscode/build.sh [OUT.vsix]
#
# 1. copies the extension's sources to $TRAINFIX_BUILD_CACHE/vscode/work (default ~/.cache/trainfix/vscode/work);
# 2. `npm ci` from the npm registry with the committed package-lock.json, only when the lock (or node) changed:
#    node_modules stays there between runs;
# 3. `tsc`, then the unit tests (`node --test`), then `vsce package`.
# The .vsix goes to OUT.vsix, else $TRAINFIX_VSIX, else $TRAINFIX_BUILD_CACHE/vscode/trainfix-<version>.vsix;
# its path is printed on the last line ("vsix: PATH").
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SRC/../.." && pwd)"
CACHE_ROOT="${TRAINFIX_BUILD_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/trainfix}"
mkdir -p "$CACHE_ROOT"
CACHE="$(cd "$CACHE_ROOT" && pwd)/vscode"
case "$CACHE/" in
  "$REPO"/*) echo "build.sh: the build cache ($CACHE) must be outside the repository ($REPO); set TRAINFIX_BUILD_CACHE" >&2; exit 2 ;;
esac
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is not installed (Node.js >= 20 with npm is needed)" >&2; exit 2; }
done
node -e 'process.exit(parseInt(process.versions.node) >= 20 ? 0 : 1)' || { echo "build.sh: Node.js >= 20 is needed (found $(node --version))" >&2; exit 2; }

VERSION="$(node -p "require('$SRC/package.json').version")"
OUT="${1:-${TRAINFIX_VSIX:-$CACHE/trainfix-$VERSION.vsix}}"
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
WORK="$CACHE/work"
mkdir -p "$WORK" "$(dirname "$OUT")"
if command -v flock >/dev/null; then exec 9>"$CACHE/.lock" && flock 9; fi   # one build at a time per cache
t0=$(date +%s%N)

# sources: replace everything but node_modules, so a removed file does not linger
find "$WORK" -mindepth 1 -maxdepth 1 ! -name node_modules -exec rm -rf {} +
cp -R "$SRC/src" "$SRC/package.json" "$SRC/package-lock.json" "$SRC/tsconfig.json" "$SRC/.vscodeignore" "$SRC/README.md" "$WORK/"
[ -f "$SRC/screenshot.png" ] && cp "$SRC/screenshot.png" "$WORK/"
cd "$WORK"

stamp="$(cat package-lock.json <(node --version) | sha256sum | cut -d' ' -f1)"
if [ -f node_modules/.trainfix-stamp ] && [ "$(cat node_modules/.trainfix-stamp)" = "$stamp" ]; then
  echo "build.sh: node_modules is up to date (cached in $WORK)"
else
  echo "build.sh: npm ci (cold: node_modules not cached or package-lock.json changed)"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$stamp" > node_modules/.trainfix-stamp
fi

./node_modules/.bin/tsc -p .
echo "build.sh: unit tests"
node --test out/test/
# no repository field (the extension ships with trainfix, not from a public marketplace repo) and no LICENSE file
# in the project yet; README images stay relative (the screenshot is packaged beside the README)
./node_modules/.bin/vsce package --allow-missing-repository --skip-license --no-rewrite-relative-links --out "$OUT"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "build.sh: built in $((ms / 1000)).$(( (ms % 1000) / 100 )) s"
echo "vsix: $OUT"
