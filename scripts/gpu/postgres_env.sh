#!/usr/bin/env bash
# PostgreSQL 15 on a bare GPU host, from Debian's packages, so that several workers there share the fleet's real
# database (issue 30). The host has no network and no PostgreSQL; the .debs are fetched beforehand, where there is
# a network, and carried in .debs/postgresql/ (scripts/gpu/fetch_device_deps.sh calls `fetch`), as bubblewrap's are.
#
#   bash scripts/gpu/postgres_env.sh fetch [DIR] [--dry-run]   # here: resolve postgresql-15's closure, download it
#   source scripts/gpu/postgres_env.sh                          # GPU host: unpack, initdb, start; export JUDGE_PG_URL
#   bash scripts/gpu/postgres_env.sh stop                       # GPU host: stop the server
#
# Sourced (or `start`), it unpacks the .debs with `dpkg -x` into JUDGE_PG_PREFIX (nothing is installed into the
# host's / and its package database is untouched), creates a cluster in JUDGE_PG_DATA owned by an unprivileged
# user (PostgreSQL refuses to run as root, and the device machine's commands run as root), starts it on
# 127.0.0.1:JUDGE_PG_PORT with trust authentication for local TCP (the host is single-tenant and unreachable from
# outside), creates the database JUDGE_PG_DB and exports JUDGE_PG_URL, e.g.
# postgresql+psycopg://postgres@127.0.0.1:5432/judge: give it to every worker as DATABASE_URL. A server already
# answering on that port is used as it is. The libraries the packages bring are given to PostgreSQL's own
# processes only (LD_LIBRARY_PATH on their command line), never exported to the shell, so torch and the judge keep
# the host's libraries. JIT is off: LLVM is left out of the download (25 MB) and buys nothing for the queue's short
# statements.
JUDGE_PG_PREFIX=${JUDGE_PG_PREFIX:-/opt/judge-pg}
JUDGE_PG_DATA=${JUDGE_PG_DATA:-/tmp/judge-pg/data}
JUDGE_PG_PORT=${JUDGE_PG_PORT:-5432}
JUDGE_PG_DB=${JUDGE_PG_DB:-judge}
JUDGE_PG_USER=${JUDGE_PG_USER:-judgepg}
JUDGE_PG_MAX_CONNECTIONS=${JUDGE_PG_MAX_CONNECTIONS:-400}
_pg_debs_dir=${JUDGE_PG_DEBS:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.debs/postgresql}
_pg_version=15

# Left out of postgresql-15's dependency closure: the C runtime every host has (a second glibc on the library path
# would break the binaries), packaging and maintainer-script machinery (the binaries are called directly, not
# through postgresql-common's Perl wrappers), LLVM (JIT is off), locales (the cluster is initialised with the C
# locale) and the PAM modules and SELinux policy tools that only the packages' scripts use.
_pg_skip='^(libc6|libc-bin|libc-l10n|libgcc-s1|libstdc\+\+6|gcc-[0-9]+-base|dpkg|tar|install-info|debconf|cdebconf|'\
'adduser|passwd|perl|perl-base|perl-modules-.*|libperl.*|lib.*-perl|postgresql-common|postgresql-client-common|'\
'init-system-helpers|lsb-base|sysvinit-utils|sensible-utils|ucf|ssl-cert|usrmerge|usr-is-merged|locales|locales-all|'\
'libllvm[0-9]+|libz3-[0-9]+|netbase|openssl|libdebian-installer.*|libnewt.*|libslang2|libtextwrap1|libpam-modules.*|'\
'libsemanage.*|libsepol.*|libelogind0|readline-common|libdb5\.3|libgdbm.*)$'

_pg_resolve() {
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
        --no-enhances "postgresql-$_pg_version" | grep -E '^[a-z0-9]' | sort -u | grep -Ev "$_pg_skip"
}

_pg_fetch() {
    local dir=${1:-$_pg_debs_dir} dry=${2:-}
    [ "$dir" = --dry-run ] && { dry=--dry-run; dir=$_pg_debs_dir; }
    local packages
    packages=$(_pg_resolve) || { echo "postgres_env: apt-cache could not resolve postgresql-$_pg_version" >&2; return 1; }
    echo "postgres_env: $(echo "$packages" | wc -l) packages: $(echo $packages)"
    if [ "$dry" = --dry-run ]; then
        apt-get download --print-uris $packages | awk '{print $2, $3}'
        return
    fi
    rm -rf "$dir" && mkdir -p "$dir"
    # apt-get download writes as root unsandboxed where _apt cannot write the folder; the warning is harmless.
    (cd "$dir" && apt-get download -q $packages 2>&1 | grep -v "^W: Download is performed unsandboxed") || true
    local missing=0 p
    for p in $packages; do
        ls "$dir/${p}_"*.deb >/dev/null 2>&1 || { echo "postgres_env: $p not downloaded" >&2; missing=1; }
    done
    du -sh "$dir"
    return $missing
}

_pg_bin() { echo "$JUDGE_PG_PREFIX/usr/lib/postgresql/$_pg_version/bin"; }

_pg_libs() {
    local d out=
    for d in "$JUDGE_PG_PREFIX"/usr/lib/x86_64-linux-gnu "$JUDGE_PG_PREFIX"/lib/x86_64-linux-gnu; do
        [ -d "$d" ] && out=${out:+$out:}$d
    done
    echo "$out"
}

# Run a PostgreSQL binary as the cluster's owner, with the packages' libraries.
_pg_as_owner() {
    local tool=$1; shift
    local cmd=(env LD_LIBRARY_PATH="$(_pg_libs)" "$(_pg_bin)/$tool" "$@")
    if [ "$(id -u)" = 0 ]; then
        runuser -u "$JUDGE_PG_USER" -- "${cmd[@]}"
    else
        "${cmd[@]}"
    fi
}

_pg_ready() {
    [ -x "$(_pg_bin)/pg_isready" ] || return 1
    env LD_LIBRARY_PATH="$(_pg_libs)" "$(_pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$JUDGE_PG_PORT"
}

_pg_start() {
    if [ ! -x "$(_pg_bin)/postgres" ]; then
        ls "$_pg_debs_dir"/postgresql-${_pg_version}_*.deb >/dev/null 2>&1 \
            || { echo "postgres_env: no postgresql-$_pg_version .deb in $_pg_debs_dir (run fetch first)" >&2; return 1; }
        mkdir -p "$JUDGE_PG_PREFIX"
        local deb
        for deb in "$_pg_debs_dir"/*.deb; do dpkg -x "$deb" "$JUDGE_PG_PREFIX" || return 1; done
    fi
    # Debian's build reads time zones from /usr/share/zoneinfo (--with-system-tzdata): lend the carried tzdata to a
    # host that has none.
    if [ ! -e /usr/share/zoneinfo/UTC ] && [ -e "$JUDGE_PG_PREFIX/usr/share/zoneinfo/UTC" ] && [ "$(id -u)" = 0 ]; then
        mkdir -p /usr/share && ln -sfn "$JUDGE_PG_PREFIX/usr/share/zoneinfo" /usr/share/zoneinfo
    fi
    if _pg_ready; then
        echo "postgres_env: a server already answers on 127.0.0.1:$JUDGE_PG_PORT"
    else
        if [ "$(id -u)" = 0 ] && ! id -u "$JUDGE_PG_USER" >/dev/null 2>&1; then
            useradd --system --no-create-home --shell /usr/sbin/nologin "$JUDGE_PG_USER" 2>/dev/null \
                || { echo "postgres_env: useradd failed; running the cluster as nobody" >&2; JUDGE_PG_USER=nobody; }
        fi
        local run
        run=$(dirname "$JUDGE_PG_DATA")
        mkdir -p "$run"
        [ "$(id -u)" = 0 ] && chown "$JUDGE_PG_USER" "$run"
        if [ ! -s "$JUDGE_PG_DATA/PG_VERSION" ]; then
            _pg_as_owner initdb -D "$JUDGE_PG_DATA" -U postgres --auth=trust --locale=C --encoding=UTF8 \
                > "$run/initdb.log" 2>&1 || { cat "$run/initdb.log" >&2; return 1; }
        fi
        _pg_as_owner pg_ctl -D "$JUDGE_PG_DATA" -l "$run/server.log" -w -t 60 start -o \
            "-c listen_addresses=127.0.0.1 -p $JUDGE_PG_PORT -c unix_socket_directories=$run -c jit=off -c max_connections=$JUDGE_PG_MAX_CONNECTIONS" > /dev/null || { tail -20 "$run/server.log" >&2; return 1; }
    fi
    env LD_LIBRARY_PATH="$(_pg_libs)" "$(_pg_bin)/psql" -h 127.0.0.1 -p "$JUDGE_PG_PORT" -U postgres -d postgres -Atq \
        -c "SELECT 1 FROM pg_database WHERE datname = '$JUDGE_PG_DB'" | grep -q 1 \
        || env LD_LIBRARY_PATH="$(_pg_libs)" "$(_pg_bin)/psql" -h 127.0.0.1 -p "$JUDGE_PG_PORT" -U postgres -d postgres \
            -q -c "CREATE DATABASE \"$JUDGE_PG_DB\"" || return 1
    # The workers' driver: carried as wheels by fetch_device_deps.sh; installed beside the others when missing.
    if ! python3 -c "import psycopg" 2>/dev/null && ls .whl/psycopg*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /opt/judge-site .whl/psycopg*.whl \
            && export PYTHONPATH=/opt/judge-site${PYTHONPATH:+:$PYTHONPATH}
    fi
    export JUDGE_PG_URL="postgresql+psycopg://postgres@127.0.0.1:$JUDGE_PG_PORT/$JUDGE_PG_DB"
    echo "postgres_env: PostgreSQL $_pg_version on 127.0.0.1:$JUDGE_PG_PORT; JUDGE_PG_URL=$JUDGE_PG_URL"
}

_pg_stop() {
    _pg_as_owner pg_ctl -D "$JUDGE_PG_DATA" -m fast -w stop
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then  # executed: a subcommand
    set -uo pipefail
    case ${1:-start} in
        fetch) shift; _pg_fetch "$@" ;;
        start) _pg_start ;;
        stop) _pg_stop ;;
        *) echo "usage: $0 fetch [DIR] [--dry-run] | start | stop" >&2; exit 2 ;;
    esac
else  # sourced: start and export JUDGE_PG_URL into the caller's shell
    _pg_start
fi
