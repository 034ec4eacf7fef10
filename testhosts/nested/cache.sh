# Sourced by build-image.sh and build-wheelhouse.sh: how a built artefact is cached.
#
#   nested_cache_enter PREFIX LOCK FILE... -- WORD...
#       KEY = a hash of the FILEs, this file and the WORDs (one a line); dest=$cache/PREFIX-KEY.
#       When dest is complete, logs "reusing", prints it and exits the calling script (0).
#       Otherwise takes $cache/LOCK (fd 9: one build at a time on this machine; a second caller
#       waits, then finds the artefact made) and returns with $key and $dest set.
#   nested_cache_publish DIR
#       Marks DIR complete, moves it to $dest, and deletes every other complete PREFIX-* (older
#       keys are of no further use: the disk keeps one of each).
#
# The caller defines log(). VIRTDRIVER_NESTED_CACHE moves the cache (default
# /var/tmp/virtdriver-nested), e.g. to build an image with other inputs without deleting the
# one another run is using.
cache=${VIRTDRIVER_NESTED_CACHE:-/var/tmp/virtdriver-nested}
nested_cache_lib=${BASH_SOURCE[0]}

nested_cache_enter() {
    local lock files=() words=()
    nested_cache_prefix=$1 lock=$2
    shift 2
    while (($#)) && [ "$1" != -- ]; do files+=("$1"); shift; done
    (($#)) && shift
    words=("$@")
    key=$( { cat "${files[@]}" "$nested_cache_lib"; printf '%s\n' "${words[@]}"; } \
           | sha256sum | cut -c1-16)
    dest="$cache/$nested_cache_prefix-$key"
    if [ -f "$dest/complete" ]; then
        log "reusing $dest"
        echo "$dest"
        exit 0
    fi
    mkdir -p "$cache"
    exec 9>"$cache/$lock"
    flock 9
    if [ -f "$dest/complete" ]; then
        log "reusing $dest (built while this run waited)"
        echo "$dest"
        exit 0
    fi
}

nested_cache_publish() {
    local src=$1 old
    touch "$src/complete"
    rm -rf "$dest"
    mv "$src" "$dest"
    for old in "$cache/$nested_cache_prefix"-*; do
        [ "$old" = "$dest" ] || [ ! -f "$old/complete" ] || rm -rf "$old"
    done
}
