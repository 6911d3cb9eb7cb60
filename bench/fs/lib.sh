# bench/fs/lib.sh — inputs shared by bench/fs/run.sh and bench/fs/floor.sh (sourced, not run).

# make_small_tar DIR: DIR/small.tar, 200 directories of 100 small text files (20k files), built
# in DIR/gen and then removed.
make_small_tar() {
  local dir=$1
  mkdir -p "$dir/gen"
  python3 - "$dir/gen" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(200):
    p = os.path.join(root, "d%03d" % d)
    os.mkdir(p)
    for f in range(100):
        with open(os.path.join(p, "f%03d.txt" % f), "w") as fh:
            fh.write("file %d/%d\n" % (d, f) * 8)
PY
  tar cf "$dir/small.tar" -C "$dir/gen" .
  rm -rf "$dir/gen"
}

# make_repo_tree TAR DEST: the git status tree, 100 of the tarball's directories (10k files).
make_repo_tree() {
  mkdir -p "$2"
  tar xf "$1" -C "$2" ./d0{0,1,2,3,4}{0,1,2,3,4,5,6,7,8,9} ./d1{0,1,2,3,4}{0,1,2,3,4,5,6,7,8,9}
}

# git_commit_all DIR: a repository of everything in DIR, one commit, index fresh (status only stats).
git_commit_all() {
  git -C "$1" init -q -b main
  git -C "$1" add -A
  git -C "$1" -c user.name=b -c user.email=b@b commit -qm init
  git -C "$1" status --porcelain > /dev/null
}

# create_delete_10k DIR [WRAPPER...]: the create+delete workload, 10k empty files made and removed
# in DIR/cd, run under WRAPPER (e.g. taskset -c 0) when given.
create_delete_10k() {
  local dir=$1
  shift
  "$@" python3 - "$dir" <<'PY'
import os, sys
d = os.path.join(sys.argv[1], "cd"); os.mkdir(d)
for i in range(10000):
    open(os.path.join(d, "x%05d" % i), "w").close()
for i in range(10000):
    os.unlink(os.path.join(d, "x%05d" % i))
os.rmdir(d)
PY
}
