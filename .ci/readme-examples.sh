#!/usr/bin/env bash
# Runs the README's "Using Ferrite from C" and "from Python" examples as
# printed: the fruit.c and fruit.cpp blocks compiled through pkg-config
# against the release build, the Python block with the given interpreter.
#   .ci/readme-examples.sh c
#   .ci/readme-examples.sh python PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."
what=$1
work=$(mktemp -d)
trap 'rm -rf "$work" /dev/shm/fruit-c.pool /dev/shm/fruit-cpp.pool /dev/shm/fruit-py.pool' EXIT
# block SECTION LANG: the first ```LANG block after the heading SECTION.
block() {
    python3 - "$1" "$2" <<'PY'
import sys
text = open("README.md").read()
sec = text.index(sys.argv[1])
start = text.index("```" + sys.argv[2] + "\n", sec) + len(sys.argv[2]) + 4
print(text[start:text.index("```\n", start)], end="")
PY
}
rm -f /dev/shm/fruit-c.pool /dev/shm/fruit-cpp.pool /dev/shm/fruit-py.pool
case $what in
c)
    export PKG_CONFIG_PATH=$PWD/target/release/pkgconfig
    block "## Using Ferrite from C" c > "$work/fruit.c"
    block "## Using Ferrite from C" cpp > "$work/fruit.cpp"
    (cd "$work" && cc fruit.c $(pkg-config --cflags --libs ferrite) -o fruit && ./fruit) | tee "$work/c.out"
    grep -qx "apple = red" "$work/c.out"
    grep -qx "kiwi = green" "$work/c.out"
    grep -q "^refused: key of 0 bytes" "$work/c.out"
    (cd "$work" && c++ -std=c++17 fruit.cpp $(pkg-config --cflags --libs ferrite) -o fruit-cpp && ./fruit-cpp) | tee "$work/cpp.out"
    grep -qx "apple = red" "$work/cpp.out"
    grep -q "^refused: ferrite_store_put: key of 0 bytes" "$work/cpp.out"
    ;;
python)
    py=${2:-python3}
    if [[ $py == */* ]]; then py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py"); fi
    block "## Using Ferrite from Python" python > "$work/fruit.py"
    (cd "$work" && "$py" fruit.py) | tee "$work/py.out"
    grep -qx "2 b'none'" "$work/py.out"
    grep -q "^TypeError:" "$work/py.out"
    grep -q "^clean (cow engine" "$work/py.out"
    ;;
*)
    echo "usage: $0 c|python [PYTHON]" >&2
    exit 2
    ;;
esac
echo "README $what examples: ran as printed"
