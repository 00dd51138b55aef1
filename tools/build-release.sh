#!/usr/bin/env bash
# Builds the `weir` binary of an earlier release (a git tag, or a commit) for the rolling-upgrade
# test (make test-upgrade):
#
#   tools/build-release.sh v0.1.0        # prints the path of its binary
#
# The release's source is checked out in a git worktree under target/releases/<rev>/ and built
# there with a target directory of its own (the working tree's build is untouched), without debug
# info; only the binary is kept (target/releases/<rev>/weir, with the commit in COMMIT beside it),
# the worktree and its build are removed. A binary built before from the same commit is reused.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REV=${1:?usage: tools/build-release.sh <tag or commit>}

# A tag, a commit, or (a clone without tags) the commit CHANGELOG.md gives for a release
# ("## 0.1.0 - 2026-12-06" followed by "Commit 7ea6144, tagged v0.1.0.").
commit=$(git -C "$ROOT" rev-parse --verify -q "$REV^{commit}") ||
  commit=$(git -C "$ROOT" rev-parse --verify -q "$(sed -n "/^## ${REV#v} /,/^## /s/^Commit \([0-9a-f]\{7,40\}\), tagged .*/\1/p" \
    "$ROOT/CHANGELOG.md" | head -1)^{commit}") || {
  echo "build-release.sh: $REV is neither a tag nor a commit of this clone, nor a release" \
       "CHANGELOG.md gives the commit of (a clone without tags: git fetch --tags)" >&2
  exit 2
}
dir=$ROOT/target/releases/$REV
bin=$dir/weir
if [[ -x $bin && $(cat "$dir/COMMIT" 2>/dev/null) == "$commit" ]]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$dir"
rm -rf "$dir/src" "$dir/target"
git -C "$ROOT" worktree prune
git -C "$ROOT" worktree add -q --detach "$dir/src" "$commit" >&2
echo "build-release.sh: building $REV ($commit) in $dir" >&2
(cd "$dir/src" && CARGO_TARGET_DIR="$dir/target" CARGO_PROFILE_DEV_DEBUG=0 \
  cargo build -q --locked -p weir --bin weir) >&2
cp "$dir/target/debug/weir" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "$commit" >"$dir/COMMIT"
git -C "$ROOT" worktree remove --force "$dir/src"
rm -rf "$dir/target"
echo "$bin"
